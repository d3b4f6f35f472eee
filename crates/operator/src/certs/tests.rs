use super::*;

const HOUR: i64 = 3600;
const NOW: i64 = 1_800_000_000;

fn cfg() -> CertConfig {
    CertConfig {
        service: "svc".into(),
        namespace: "ns".into(),
        extra_dns: vec!["localhost".into()],
        extra_ips: vec!["127.0.0.1".parse().unwrap()],
        ca_validity: Duration::from_secs(30 * 24 * HOUR as u64),
        leaf_validity: Duration::from_secs(3 * 24 * HOUR as u64),
        renew_at: 2.0 / 3.0,
        overlap: Duration::from_secs(60),
    }
}

fn fresh() -> Material {
    act(&Action::Generate("test".into()), None, &cfg(), NOW).unwrap()
}

#[test]
fn generated_material_is_valid_and_names_the_service() {
    let m = fresh();
    let (ca, leaf) = check(&m, &cfg(), NOW).unwrap();
    assert!(ca.is_ca && !leaf.is_ca);
    for n in [
        "svc",
        "svc.ns",
        "svc.ns.svc",
        "svc.ns.svc.cluster.local",
        "localhost",
    ] {
        assert!(leaf.dns_names.contains(&n.to_string()), "{n}");
    }
    assert_eq!(leaf.ips, vec!["127.0.0.1".parse::<IpAddr>().unwrap()]);
    assert_eq!(leaf.not_after - NOW, 3 * 24 * HOUR);
    assert!(m.ca_key.contains("PRIVATE KEY"));
    assert!(
        !format!("{m:?}").contains("PRIVATE"),
        "Debug must not print keys"
    );
    let back = Material::from_data(&m.to_data(), m.step_since).unwrap();
    assert_eq!(back, m);
}

#[test]
fn decide_table() {
    let c = cfg();
    let m = fresh();
    let leaf_renew = NOW + 2 * 24 * HOUR + 60; // past 2/3 of 3 days
    let ca_renew = NOW + 20 * 24 * HOUR + 60; // past 2/3 of 30 days
    let cases: Vec<(&str, Option<&Material>, i64, bool, &str)> = vec![
        ("no secret", None, NOW, false, "Generate"),
        ("fresh", Some(&m), NOW + HOUR, false, "Keep"),
        ("leaf at 2/3", Some(&m), leaf_renew, false, "RenewLeaf"),
        (
            "leaf expired",
            Some(&m),
            NOW + 3 * 24 * HOUR + 1,
            false,
            "RenewLeaf",
        ),
        // A replica whose clock is behind: within the tolerated skew the material is fine
        // (the certificates start 5 minutes before they were made, and 5 more are tolerated);
        // beyond it, nothing is regenerated (that would take the trust away from every replica
        // whose clock is right): it waits and says why.
        ("clock 9 min behind", Some(&m), NOW - 9 * 60, false, "Keep"),
        ("clock 1 hour behind", Some(&m), NOW - HOUR, false, "Wait"),
        (
            "ca expired",
            Some(&m),
            NOW + 31 * 24 * HOUR,
            false,
            "Generate",
        ),
    ];
    for (name, mat, now, applied, want) in cases {
        let got = format!("{:?}", decide(mat, &c, now, applied));
        assert!(got.starts_with(want), "{name}: {got}");
    }
    let Action::Wait(why) = decide(Some(&m), &c, NOW - HOUR, false) else {
        unreachable!("checked above")
    };
    assert!(why.contains("ca.crt") && why.contains("clock"), "{why}");
    // The CA is rotated at 2/3 of its life (the leaf there is renewed by the new CA).
    let renewed = act(
        &Action::RenewLeaf("t".into()),
        Some(&m),
        &c,
        ca_renew - 24 * HOUR,
    )
    .unwrap();
    assert_eq!(
        decide(Some(&renewed), &c, ca_renew, false),
        Action::StartCaRotation
    );
}

#[test]
fn ca_rotation_keeps_every_served_leaf_trusted() {
    let c = cfg();
    let t0 = NOW + 21 * 24 * HOUR;
    let m0 = act(
        &Action::RenewLeaf("t".into()),
        Some(&fresh()),
        &c,
        t0 - HOUR,
    )
    .unwrap();
    assert_eq!(decide(Some(&m0), &c, t0, true), Action::StartCaRotation);

    let m1 = act(&Action::StartCaRotation, Some(&m0), &c, t0).unwrap();
    assert_eq!(m1.tls_cert, m0.tls_cert, "step 1 still serves the old leaf");
    assert!(bundle_contains(m1.ca_bundle().as_bytes(), &m0.ca_cert));
    assert!(bundle_contains(
        m1.ca_bundle().as_bytes(),
        &m1.next_ca.as_ref().unwrap().0
    ));
    // Not promoted before the bundle is applied and the overlap has passed.
    assert_eq!(decide(Some(&m1), &c, t0 + 120, false), Action::Keep);
    assert_eq!(decide(Some(&m1), &c, t0 + 10, true), Action::Keep);
    assert_eq!(decide(Some(&m1), &c, t0 + 61, true), Action::PromoteCa);

    let m2 = act(&Action::PromoteCa, Some(&m1), &c, t0 + 61).unwrap();
    check(&m2, &c, t0 + 61).unwrap();
    assert!(signed_by(&m2.tls_cert, &m1.next_ca.as_ref().unwrap().0).unwrap());
    // The bundle published during step 1 already trusts the new leaf; the step-2 bundle still
    // trusts the old leaf a slow replica may serve.
    assert!(bundle_contains(m1.ca_bundle().as_bytes(), &m2.ca_cert));
    assert!(bundle_contains(m2.ca_bundle().as_bytes(), &m0.ca_cert));
    assert_eq!(decide(Some(&m2), &c, t0 + 100, true), Action::Keep);
    assert_eq!(
        decide(Some(&m2), &c, t0 + 122, true),
        Action::FinishCaRotation
    );

    let m3 = act(&Action::FinishCaRotation, Some(&m2), &c, t0 + 122).unwrap();
    assert_eq!(bundle_ders(m3.ca_bundle().as_bytes()).len(), 1);
    assert_eq!(decide(Some(&m3), &c, t0 + 200, true), Action::Keep);
}

#[test]
fn defects_are_found_and_named() {
    let c = cfg();
    let m = fresh();
    let other = fresh();
    let cases: Vec<(&str, Material, &str, &str)> = vec![
        (
            "garbage ca",
            Material {
                ca_cert: "garbage".into(),
                ..m.clone()
            },
            "Generate",
            "ca.crt",
        ),
        (
            "ca key of another ca",
            Material {
                ca_key: other.ca_key.clone(),
                ..m.clone()
            },
            "Generate",
            "ca.key is not the key",
        ),
        (
            "leaf is the ca",
            Material {
                tls_cert: m.ca_cert.clone(),
                tls_key: m.ca_key.clone(),
                ..m.clone()
            },
            "RenewLeaf",
            "is a CA certificate",
        ),
        (
            "wrong leaf key",
            Material {
                tls_key: other.tls_key.clone(),
                ..m.clone()
            },
            "RenewLeaf",
            "tls.key is not the key",
        ),
        (
            "leaf of another ca",
            Material {
                tls_cert: other.tls_cert.clone(),
                tls_key: other.tls_key.clone(),
                ..m.clone()
            },
            "RenewLeaf",
            "not signed by ca.crt",
        ),
        (
            "garbage key",
            Material {
                tls_key: "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n".into(),
                ..m.clone()
            },
            "RenewLeaf",
            "tls.key",
        ),
    ];
    for (name, mat, want, reason) in cases {
        let got = format!("{:?}", decide(Some(&mat), &c, NOW + HOUR, false));
        assert!(
            got.starts_with(want) && got.contains(reason),
            "{name}: {got}"
        );
        // And acting on it gives usable material.
        let fixed = act(
            &decide(Some(&mat), &c, NOW + HOUR, false),
            Some(&mat),
            &c,
            NOW + HOUR,
        )
        .unwrap();
        check(&fixed, &c, NOW + HOUR).unwrap_or_else(|e| panic!("{name}: {e:?}"));
    }
    let mut data = m.to_data();
    data.remove(KEY_TLS_KEY);
    assert_eq!(
        Material::from_data(&data, None).unwrap_err(),
        "key tls.key is missing"
    );
    let wrong_service = CertConfig {
        service: "other".into(),
        ..c.clone()
    };
    assert!(
        matches!(decide(Some(&m), &wrong_service, NOW, false), Action::RenewLeaf(w) if w.contains("other"))
    );
}

#[test]
fn short_lifetimes_renew_at_the_right_fraction() {
    // Backdating (clock skew) must not pull the renewal point forward: a 180 s CA with a 60 s
    // leaf renews the leaf at 30 s and rotates the CA at 90 s, not at once.
    let c = CertConfig {
        ca_validity: Duration::from_secs(180),
        leaf_validity: Duration::from_secs(60),
        renew_at: 0.5,
        overlap: Duration::from_secs(8),
        ..cfg()
    };
    let m = act(&Action::Generate("t".into()), None, &c, NOW).unwrap();
    assert_eq!(decide(Some(&m), &c, NOW + 1, true), Action::Keep);
    assert_eq!(decide(Some(&m), &c, NOW + 29, true), Action::Keep);
    assert!(matches!(
        decide(Some(&m), &c, NOW + 31, true),
        Action::RenewLeaf(_)
    ));
    let m = act(&Action::RenewLeaf("t".into()), Some(&m), &c, NOW + 31).unwrap();
    assert_eq!(decide(Some(&m), &c, NOW + 60, true), Action::Keep);
    let m = act(&Action::RenewLeaf("t".into()), Some(&m), &c, NOW + 62).unwrap();
    assert_eq!(decide(Some(&m), &c, NOW + 89, true), Action::Keep);
    assert_eq!(
        decide(Some(&m), &c, NOW + 91, true),
        Action::StartCaRotation
    );
    // With long lifetimes the 5-minute backdate does not count either.
    let long = act(&Action::Generate("t".into()), None, &cfg(), NOW).unwrap();
    assert_eq!(
        decide(Some(&long), &cfg(), NOW + 2 * 24 * HOUR - 60, true),
        Action::Keep
    );
}

#[test]
fn the_leaf_never_outlives_its_ca() {
    let c = CertConfig {
        leaf_validity: Duration::from_secs(60 * 24 * HOUR as u64),
        ..cfg()
    };
    let m = act(&Action::Generate("t".into()), None, &c, NOW).unwrap();
    let (ca, leaf) = check(&m, &c, NOW).unwrap();
    assert!(leaf.not_after <= ca.not_after);
}
