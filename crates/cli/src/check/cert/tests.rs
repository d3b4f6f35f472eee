//! Whether a caBundle trusts a leaf certificate.

use super::verify_leaf;

#[test]
fn a_leaf_is_trusted_only_by_the_ca_that_signed_it() {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca = |cn: &str| {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        let cert = p.self_signed(&key).unwrap();
        (cert.pem(), key)
    };
    let (ca_a, key_a) = ca("ca");
    let (ca_b, _) = ca("ca"); // same name, another key: only the signature tells them apart
    let issuer = Issuer::from_ca_cert_pem(&ca_a, key_a).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&leaf_key, &issuer)
        .unwrap();
    let (trusted, not_after) = verify_leaf(leaf.der(), ca_a.as_bytes()).unwrap();
    assert_eq!(trusted, Ok(()));
    assert!(not_after > 0);
    let (trusted, _) = verify_leaf(leaf.der(), ca_b.as_bytes()).unwrap();
    assert!(trusted.is_err(), "CA b must not trust a leaf of CA a");
    let both = format!("{ca_b}{ca_a}");
    assert_eq!(
        verify_leaf(leaf.der(), both.as_bytes()).unwrap().0,
        Ok(()),
        "a bundle with both CAs (a rotation) trusts it"
    );
    assert!(verify_leaf(leaf.der(), b"").unwrap().0.is_err());
    assert!(verify_leaf(b"not a certificate", ca_a.as_bytes()).is_err());
}
