//! Self-managed webhook TLS: a CA and a serving leaf (rcgen, ECDSA P-256), kept in one Secret,
//! checked, renewed before expiry and rotated with an overlap so that no admission fails.
//!
//! This module is the pure part: what the Secret holds, whether it is usable, and what to do
//! next ([`decide`] then [`act`]). `manager` is the shell that reads and writes the Secret,
//! serves the leaf and patches `caBundle`.
//!
//! CA rotation goes through three Secret states, each written with the Secret's resourceVersion
//! so that among several replicas exactly one write wins:
//! 1. `next-ca.*` added: the published bundle is old CA + new CA; the old leaf is still served.
//! 2. once that bundle is in every webhook configuration and `overlap` has passed: the new CA
//!    becomes `ca.*`, a new leaf signed by it is served, the old CA stays as `prev-ca.crt`.
//! 3. after another `overlap` (every replica has reloaded): `prev-ca.crt` is dropped.

pub mod crd;
pub mod manager;

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::tls::pem_der;
pub use crate::tls::{CLOCK_SKEW, CertInfo, bundle_ders, cert_info, ts};

pub const KEY_CA_CERT: &str = "ca.crt";
pub const KEY_CA_KEY: &str = "ca.key";
pub const KEY_TLS_CERT: &str = "tls.crt";
pub const KEY_TLS_KEY: &str = "tls.key";
pub const KEY_NEXT_CA_CERT: &str = "next-ca.crt";
pub const KEY_NEXT_CA_KEY: &str = "next-ca.key";
pub const KEY_PREV_CA_CERT: &str = "prev-ca.crt";
/// Secret annotation: when the current rotation step was written (unix seconds).
pub const ANNOTATION_STEP_SINCE: &str = "sidecarset-operator.io/cert-step-since";

/// What certificates to make and when to renew them.
#[derive(Clone, Debug)]
pub struct CertConfig {
    pub service: String,
    pub namespace: String,
    pub extra_dns: Vec<String>,
    pub extra_ips: Vec<IpAddr>,
    pub ca_validity: Duration,
    pub leaf_validity: Duration,
    /// Renew at this fraction of the lifetime (default 2/3).
    pub renew_at: f64,
    /// How long old and new CAs are both trusted during a CA rotation.
    pub overlap: Duration,
}

impl CertConfig {
    /// DNS names of the leaf: the Service in its short and long forms, plus the extra names.
    pub fn dns_names(&self) -> Vec<String> {
        let (s, n) = (&self.service, &self.namespace);
        let mut v = vec![
            s.clone(),
            format!("{s}.{n}"),
            format!("{s}.{n}.svc"),
            format!("{s}.{n}.svc.cluster.local"),
        ];
        v.extend(self.extra_dns.iter().cloned());
        v
    }
}

/// The PEM material of the Secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Material {
    pub ca_cert: String,
    pub ca_key: String,
    pub tls_cert: String,
    pub tls_key: String,
    pub next_ca: Option<(String, String)>,
    pub prev_ca_cert: Option<String>,
    /// When the current rotation step was written (unix seconds).
    pub step_since: Option<i64>,
}

impl std::fmt::Debug for Material {
    // Never print a private key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Material")
            .field("next_ca", &self.next_ca.is_some())
            .field("prev_ca", &self.prev_ca_cert.is_some())
            .field("step_since", &self.step_since)
            .finish_non_exhaustive()
    }
}

impl Material {
    /// Reads the Secret's data; missing or non-UTF-8 keys are errors naming the key.
    pub fn from_data(
        data: &BTreeMap<String, Vec<u8>>,
        step_since: Option<i64>,
    ) -> Result<Material, String> {
        let get = |k: &str| -> Result<String, String> {
            let v = data.get(k).ok_or_else(|| format!("key {k} is missing"))?;
            String::from_utf8(v.clone()).map_err(|_| format!("key {k} is not text (PEM expected)"))
        };
        let opt = |k: &str| {
            data.get(k)
                .and_then(|v| String::from_utf8(v.clone()).ok())
                .filter(|s| !s.trim().is_empty())
        };
        let next_ca = match (opt(KEY_NEXT_CA_CERT), opt(KEY_NEXT_CA_KEY)) {
            (Some(c), Some(k)) => Some((c, k)),
            _ => None,
        };
        Ok(Material {
            ca_cert: get(KEY_CA_CERT)?,
            ca_key: get(KEY_CA_KEY)?,
            tls_cert: get(KEY_TLS_CERT)?,
            tls_key: get(KEY_TLS_KEY)?,
            next_ca,
            prev_ca_cert: opt(KEY_PREV_CA_CERT),
            step_since,
        })
    }

    pub fn to_data(&self) -> BTreeMap<String, Vec<u8>> {
        let mut m = BTreeMap::new();
        m.insert(KEY_CA_CERT.into(), self.ca_cert.clone().into_bytes());
        m.insert(KEY_CA_KEY.into(), self.ca_key.clone().into_bytes());
        m.insert(KEY_TLS_CERT.into(), self.tls_cert.clone().into_bytes());
        m.insert(KEY_TLS_KEY.into(), self.tls_key.clone().into_bytes());
        if let Some((c, k)) = &self.next_ca {
            m.insert(KEY_NEXT_CA_CERT.into(), c.clone().into_bytes());
            m.insert(KEY_NEXT_CA_KEY.into(), k.clone().into_bytes());
        }
        if let Some(p) = &self.prev_ca_cert {
            m.insert(KEY_PREV_CA_CERT.into(), p.clone().into_bytes());
        }
        m
    }

    /// The CAs to publish as `caBundle`: current, plus next or previous during a rotation.
    pub fn ca_bundle(&self) -> String {
        let mut b = self.ca_cert.trim_end().to_string();
        for extra in [
            self.next_ca.as_ref().map(|(c, _)| c),
            self.prev_ca_cert.as_ref(),
        ]
        .into_iter()
        .flatten()
        {
            b.push('\n');
            b.push_str(extra.trim_end());
        }
        b.push('\n');
        b
    }
}

fn key_pair(pem: &str, what: &str) -> Result<KeyPair, String> {
    KeyPair::from_pem(pem).map_err(|e| format!("{what}: not a usable private key: {e}"))
}

/// True when `issuer_pem` signed `cert_pem`.
fn signed_by(cert_pem: &str, issuer_pem: &str) -> Result<bool, String> {
    let der = pem_der(cert_pem, "tls.crt")?;
    let ider = pem_der(issuer_pem, "ca.crt")?;
    let (_, cert) = X509Certificate::from_der(&der).map_err(|e| format!("tls.crt: {e}"))?;
    let (_, issuer) = X509Certificate::from_der(&ider).map_err(|e| format!("ca.crt: {e}"))?;
    Ok(cert.verify_signature(Some(issuer.public_key())).is_ok())
}

/// Why material cannot be used as it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Defect {
    /// The CA is unusable: everything must be regenerated.
    Ca(String),
    /// The leaf is unusable: re-sign it with the CA.
    Leaf(String),
    /// A certificate starts more than [`CLOCK_SKEW`] after this replica's now: its clock is
    /// probably behind. Nothing is rewritten.
    NotYetValid(String),
}

/// A certificate that starts more than [`CLOCK_SKEW`] from `now`.
fn not_yet_valid(what: &str, info: &CertInfo, now: i64) -> Option<Defect> {
    (info.not_before - now > CLOCK_SKEW).then(|| {
        Defect::NotYetValid(format!(
            "{what} is valid only from {}, {}s after this replica's clock ({}): check the node's clock (NTP); nothing is rewritten meanwhile",
            ts(info.not_before),
            info.not_before - now,
            ts(now)
        ))
    })
}

/// Checks the material at time `now`: parseable, keys match, the CA signs the leaf, both are
/// within their validity (a start up to [`CLOCK_SKEW`] ahead counts as started), the leaf names
/// the Service.
pub fn check(m: &Material, cfg: &CertConfig, now: i64) -> Result<(CertInfo, CertInfo), Defect> {
    let ca = cert_info(&m.ca_cert, "ca.crt").map_err(Defect::Ca)?;
    let ca_key = key_pair(&m.ca_key, "ca.key").map_err(Defect::Ca)?;
    if ca_key.public_key_raw() != ca.public_key.as_slice() {
        return Err(Defect::Ca("ca.key is not the key of ca.crt".into()));
    }
    if !ca.is_ca {
        return Err(Defect::Ca("ca.crt is not a CA certificate".into()));
    }
    if let Some(d) = not_yet_valid("ca.crt", &ca, now) {
        return Err(d);
    }
    if now >= ca.not_after {
        return Err(Defect::Ca(format!(
            "ca.crt is not valid now (valid {} to {})",
            ts(ca.not_before),
            ts(ca.not_after)
        )));
    }
    let leaf = cert_info(&m.tls_cert, "tls.crt").map_err(Defect::Leaf)?;
    let key = key_pair(&m.tls_key, "tls.key").map_err(Defect::Leaf)?;
    if key.public_key_raw() != leaf.public_key.as_slice() {
        return Err(Defect::Leaf("tls.key is not the key of tls.crt".into()));
    }
    if leaf.is_ca {
        return Err(Defect::Leaf(
            "tls.crt is a CA certificate, not a serving certificate".into(),
        ));
    }
    if !signed_by(&m.tls_cert, &m.ca_cert).map_err(Defect::Leaf)? {
        return Err(Defect::Leaf("tls.crt is not signed by ca.crt".into()));
    }
    if let Some(d) = not_yet_valid("tls.crt", &leaf, now) {
        return Err(d);
    }
    if now >= leaf.not_after {
        return Err(Defect::Leaf(format!(
            "tls.crt is not valid now (valid {} to {})",
            ts(leaf.not_before),
            ts(leaf.not_after)
        )));
    }
    for name in cfg.dns_names() {
        if !leaf.dns_names.contains(&name) {
            return Err(Defect::Leaf(format!("tls.crt does not name {name}")));
        }
    }
    for ip in &cfg.extra_ips {
        if !leaf.ips.contains(ip) {
            return Err(Defect::Leaf(format!("tls.crt does not name {ip}")));
        }
    }
    Ok((ca, leaf))
}

/// Certificates are valid from a little before their issue time (clock skew between replicas and
/// the API server): a tenth of the lifetime, at most 5 minutes.
fn backdate(validity_secs: i64) -> i64 {
    (validity_secs / 10).min(300)
}

/// The point at `frac` of the nominal lifetime (from issue, not from the backdated start).
fn renew_point(info: &CertInfo, frac: f64) -> i64 {
    let span = info.not_after - info.not_before; // validity + backdate
    let validity = if span >= 3300 {
        span - 300
    } else {
        span * 10 / 11
    };
    let issued = info.not_after - validity;
    issued + (validity as f64 * frac) as i64
}

/// The next step for the Secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Keep,
    /// Leave the Secret as it is although its material looks unusable to this replica: a
    /// certificate is not valid yet by this replica's clock (see [`CLOCK_SKEW`]); why.
    Wait(String),
    /// No Secret, or unusable material: make a new CA and leaf.
    Generate(String),
    /// Re-sign the leaf with the current CA.
    RenewLeaf(String),
    /// Add a next CA to the bundle (step 1).
    StartCaRotation,
    /// Serve a leaf of the next CA (step 2).
    PromoteCa,
    /// Drop the previous CA from the bundle (step 3).
    FinishCaRotation,
}

/// Decides what to do with the Secret's material. `bundle_applied`: every caBundle (both webhook
/// configurations, and the CRD's conversion settings when they are kept) already trusts every
/// CA of [`Material::ca_bundle`].
pub fn decide(m: Option<&Material>, cfg: &CertConfig, now: i64, bundle_applied: bool) -> Action {
    let Some(m) = m else {
        return Action::Generate("the Secret does not exist".into());
    };
    let (ca, leaf) = match check(m, cfg, now) {
        Ok(v) => v,
        Err(Defect::Ca(why)) => return Action::Generate(why),
        Err(Defect::Leaf(why)) => return Action::RenewLeaf(why),
        Err(Defect::NotYetValid(why)) => return Action::Wait(why),
    };
    let overlap = cfg.overlap.as_secs() as i64;
    let since = m.step_since.unwrap_or(0);
    if let Some((next_cert, next_key)) = &m.next_ca {
        let next_ok = cert_info(next_cert, "next-ca.crt").is_ok()
            && key_pair(next_key, "next-ca.key").is_ok();
        if !next_ok {
            return Action::StartCaRotation; // rewrite a broken next CA
        }
        return if bundle_applied && now - since >= overlap {
            Action::PromoteCa
        } else {
            Action::Keep
        };
    }
    if m.prev_ca_cert.is_some() {
        return if now - since >= overlap {
            Action::FinishCaRotation
        } else {
            Action::Keep
        };
    }
    // The CA must outlive the leaf it signs: rotate it once the leaf would not fit before its end.
    let leaf_secs = cfg.leaf_validity.as_secs() as i64;
    if now >= renew_point(&ca, cfg.renew_at) || ca.not_after - now < leaf_secs {
        return Action::StartCaRotation;
    }
    if now >= renew_point(&leaf, cfg.renew_at) {
        return Action::RenewLeaf(format!(
            "tls.crt reached {:.0}% of its life",
            cfg.renew_at * 100.0
        ));
    }
    Action::Keep
}

fn offset(secs: i64) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp(secs).unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

/// A new self-signed CA: (cert PEM, key PEM).
pub fn generate_ca(cfg: &CertConfig, now: i64) -> Result<(String, String), String> {
    let mut p = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        format!("sidecarset-operator webhook CA ({})", ts(now)),
    );
    p.distinguished_name = dn;
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let validity = cfg.ca_validity.as_secs() as i64;
    p.not_before = offset(now - backdate(validity));
    p.not_after = offset(now + validity);
    let key = KeyPair::generate().map_err(|e| format!("cannot make a CA key: {e}"))?;
    let cert = p
        .self_signed(&key)
        .map_err(|e| format!("cannot sign the CA: {e}"))?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A new serving leaf signed by the CA: (cert PEM, key PEM). It never outlives the CA.
pub fn sign_leaf(
    ca_cert: &str,
    ca_key: &str,
    cfg: &CertConfig,
    now: i64,
) -> Result<(String, String), String> {
    let ca_info = cert_info(ca_cert, "ca.crt")?;
    let issuer = Issuer::from_ca_cert_pem(ca_cert, key_pair(ca_key, "ca.key")?)
        .map_err(|e| format!("ca.crt cannot sign: {e}"))?;
    let mut p =
        CertificateParams::new(cfg.dns_names()).map_err(|e| format!("bad DNS name: {e}"))?;
    for ip in &cfg.extra_ips {
        p.subject_alt_names.push(SanType::IpAddress(*ip));
    }
    let mut dn = DistinguishedName::new();
    dn.push(
        DnType::CommonName,
        format!("{}.{}.svc", cfg.service, cfg.namespace),
    );
    p.distinguished_name = dn;
    p.use_authority_key_identifier_extension = true;
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let validity = (cfg.leaf_validity.as_secs() as i64).min(ca_info.not_after - now);
    p.not_before = offset(now - backdate(validity));
    p.not_after = offset(now + validity);
    let key = KeyPair::generate().map_err(|e| format!("cannot make a leaf key: {e}"))?;
    let cert = p
        .signed_by(&key, &issuer)
        .map_err(|e| format!("cannot sign the leaf: {e}"))?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Carries out an action; `Keep` returns the material unchanged.
pub fn act(
    action: &Action,
    m: Option<&Material>,
    cfg: &CertConfig,
    now: i64,
) -> Result<Material, String> {
    match (action, m) {
        (Action::Keep | Action::Wait(_), Some(m)) => Ok(m.clone()),
        (Action::Generate(_), _) | (_, None) => {
            let (ca_cert, ca_key) = generate_ca(cfg, now)?;
            let (tls_cert, tls_key) = sign_leaf(&ca_cert, &ca_key, cfg, now)?;
            Ok(Material {
                ca_cert,
                ca_key,
                tls_cert,
                tls_key,
                next_ca: None,
                prev_ca_cert: None,
                step_since: Some(now),
            })
        }
        (Action::RenewLeaf(_), Some(m)) => {
            let (tls_cert, tls_key) = sign_leaf(&m.ca_cert, &m.ca_key, cfg, now)?;
            Ok(Material {
                tls_cert,
                tls_key,
                ..m.clone()
            })
        }
        (Action::StartCaRotation, Some(m)) => Ok(Material {
            next_ca: Some(generate_ca(cfg, now)?),
            prev_ca_cert: None,
            step_since: Some(now),
            ..m.clone()
        }),
        (Action::PromoteCa, Some(m)) => {
            let (ca_cert, ca_key) = m.next_ca.clone().ok_or("no next CA to promote")?;
            let (tls_cert, tls_key) = sign_leaf(&ca_cert, &ca_key, cfg, now)?;
            Ok(Material {
                prev_ca_cert: Some(m.ca_cert.clone()),
                ca_cert,
                ca_key,
                tls_cert,
                tls_key,
                next_ca: None,
                step_since: Some(now),
            })
        }
        (Action::FinishCaRotation, Some(m)) => Ok(Material {
            prev_ca_cert: None,
            step_since: Some(now),
            ..m.clone()
        }),
    }
}

/// True when `published` (a caBundle) holds every CA of `wanted`: it trusts them.
pub fn bundle_contains(published: &[u8], wanted: &str) -> bool {
    let have = bundle_ders(published);
    let want = bundle_ders(wanted.as_bytes());
    !want.is_empty() && want.iter().all(|w| have.contains(w))
}

/// True when `published` holds the CAs of `wanted` and no other: nothing to write. (A bundle
/// that trusts more, such as the previous CA once a rotation finished, must be written again:
/// [`bundle_contains`] alone would leave a retired CA trusted for ever.)
pub fn bundle_is(published: &[u8], wanted: &str) -> bool {
    let have: std::collections::BTreeSet<Vec<u8>> = bundle_ders(published).into_iter().collect();
    let want: std::collections::BTreeSet<Vec<u8>> =
        bundle_ders(wanted.as_bytes()).into_iter().collect();
    !want.is_empty() && have == want
}

#[cfg(test)]
mod tests;
