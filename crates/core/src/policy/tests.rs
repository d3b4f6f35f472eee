use super::*;
use std::sync::Arc;

fn ss(yaml: &str) -> SidecarSet {
    let mut ss: SidecarSet = serde_saphyr::from_str(yaml).unwrap();
    crate::api::default_sidecarset(&mut ss);
    ss
}

fn basic(name: &str, container: &str, label: &str) -> SidecarSet {
    ss(&format!(
        "apiVersion: apps.kruise.io/v1alpha1\nkind: SidecarSet\nmetadata: {{name: {name}}}\n\
         spec:\n  selector: {{matchLabels: {{app: {label}}}}}\n  containers:\n  - {{name: {container}, image: busybox:1.36}}\n"
    ))
}

fn index(sets: Vec<SidecarSet>) -> Index {
    let mut idx = Index::new();
    for s in sets {
        idx.upsert(Arc::new(s)).unwrap();
    }
    idx
}

fn opts() -> Options {
    Options {
        name: "sidecarset-operator-injection".into(),
        now: "2026-12-06T00:00:00Z".into(),
        failure_policy: "Fail".into(),
        namespace_selector: None,
        object_selector: None,
        labels: BTreeMap::new(),
        skip_namespace: None,
        owner: None,
        max_sidecarsets: None,
    }
}

#[test]
fn what_the_policy_cannot_express_is_named_with_its_field() {
    let base = "apiVersion: apps.kruise.io/v1alpha1\nkind: SidecarSet\nmetadata: {name: s}\nspec:\n  selector: {matchLabels: {app: a}}\n";
    for (extra, want) in [
        ("  containers:\n  - {name: c, image: i}\n", None),
        // Built from the pod's containers, in CEL: compiled.
        (
            "  containers:\n  - {name: c, image: i, transferEnv: [{sourceContainerName: main, envName: X}]}\n",
            None,
        ),
        (
            "  containers:\n  - {name: c, image: i, transferEnv: [{sourceContainerNameFrom: {fieldRef: {fieldPath: \"metadata.labels['app']\"}}, envNames: [X, Y]}]}\n",
            None,
        ),
        (
            "  containers:\n  - {name: c, image: i}\n  - {name: d, image: i, shareVolumePolicy: {type: enabled}, shareVolumeDevicePolicy: {type: enabled}}\n",
            None,
        ),
        (
            "  initContainers:\n  - {name: c, image: i, shareVolumePolicy: {type: enabled}}\n",
            None,
        ),
        (
            "  containers:\n  - {name: c, image: i}\n  - {name: d, image: i, resourcesPolicy: {targetContainersMode: sum, resourcesExpr: {limits: {cpu: 'cpu*50%'}}}}\n",
            Some("spec.containers[1].resourcesPolicy"),
        ),
        (
            "  containers:\n  - {name: c, image: i}\n  injectionStrategy: {revision: {customVersion: v1, policy: Always}}\n",
            Some("spec.injectionStrategy.revision"),
        ),
        (
            "  containers:\n  - {name: c, image: i}\n  patchPodMetadata:\n  - {annotations: {a.io/x: '{}'}, patchPolicy: MergePatchJson}\n",
            Some("MergePatchJson"),
        ),
        (
            "  containers:\n  - {name: c, image: i}\n  patchPodMetadata:\n  - {annotations: {a.io/x: v}, patchPolicy: Overwrite}\n",
            None,
        ),
        (
            "  containers:\n  - {name: c, image: i}\nNATIVE",
            Some("sidecarset-operator.io/native-sidecars=true"),
        ),
    ] {
        let yaml = format!("{base}{extra}");
        let yaml = match yaml.strip_suffix("NATIVE") {
            Some(y) => y.replace(
                "metadata: {name: s}",
                "metadata: {name: s, annotations: {sidecarset-operator.io/native-sidecars: \"true\"}}",
            ),
            None => yaml.clone(),
        };
        let got = unsupported(&ss(&yaml));
        match want {
            None => assert_eq!(got, None, "{extra}"),
            Some(w) => assert!(
                got.as_deref().is_some_and(|g| g.contains(w)),
                "{extra}: {got:?} should name {w}"
            ),
        }
    }
}

#[test]
fn sidecarsets_are_included_or_left_to_the_webhook_with_a_reason() {
    let mut merge = basic("b-merge", "t", "web");
    merge.spec.patch_pod_metadata = vec![
        serde_json::from_value(
            json!({"annotations": {"a.io/x": "{}"}, "patchPolicy": "MergePatchJson"}),
        )
        .unwrap(),
    ];
    let mut paused = basic("d-paused", "p", "web");
    paused.spec.injection_strategy.paused = true;
    let idx = index(vec![
        basic("a-first", "proxy", "web"),
        merge,
        basic("c-clash", "proxy", "web"),
        paused,
        basic("e-other", "logger", "web"),
    ]);
    let c = compile(&idx, &opts());
    // c-clash claims a container name a-first claims: injected only where a-first is not.
    assert_eq!(c.included, ["a-first", "c-clash", "e-other"]);
    let expression = |name: &str| {
        c.head().policy["spec"]["variables"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == name)
            .map(|v| v["expression"].as_str().unwrap().to_string())
    };
    assert_eq!(expression("m0").as_deref(), Some("variables.s0"));
    assert_eq!(
        expression("m1").as_deref(),
        Some("variables.s1 && !variables.m0")
    );
    assert_eq!(expression("m2").as_deref(), Some("variables.s2"));
    let reasons: Vec<(&str, &str)> = c
        .fallbacks
        .iter()
        .map(|f| (f.sidecarset.as_str(), f.reason.as_str()))
        .collect();
    assert_eq!(reasons.len(), 1, "{reasons:?}");
    assert_eq!(reasons[0].0, "b-merge");
    assert!(reasons[0].1.contains("MergePatchJson"));
    // The policy leaves to the webhook every pod a fallback could select.
    assert_eq!(
        expression("any").as_deref(),
        Some("(variables.m0 || variables.m1 || variables.m2) && !variables.w0")
    );
    assert!(expression("w0").unwrap().contains("== 'web'"));
    assert_eq!(
        c.head().binding["spec"]["policyName"],
        c.head().policy["metadata"]["name"]
    );
    assert_eq!(
        c.head().policy["metadata"]["annotations"][PROBE_ANNOTATION],
        c.head().token
    );
    // One part: the three may select one pod; its binding lets through pods labelled web only.
    assert_eq!(c.parts.len(), 1);
    assert_eq!(
        c.head().binding["spec"]["matchResources"]["objectSelector"],
        json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]})
    );
}

#[test]
fn the_token_follows_what_the_policy_does() {
    let a = compile(&index(vec![basic("s", "c", "web")]), &opts());
    let same = compile(&index(vec![basic("s", "c", "web")]), &opts());
    let mut changed = basic("s", "c", "web");
    changed.spec.containers[0].container.image = Some("busybox:1.37".into());
    let b = compile(&index(vec![changed]), &opts());
    assert_eq!(a.token(), same.token());
    assert_ne!(a.token(), b.token());
    assert!(a.head().policy.to_string().contains("busybox:1.36"));
    assert!(b.head().policy.to_string().contains("busybox:1.37"));
}

#[test]
fn an_empty_index_compiles_to_a_policy_that_answers_probes_only() {
    let c = compile(&Index::new(), &opts());
    assert!(c.included.is_empty() && c.fallbacks.is_empty());
    let condition = c.head().policy["spec"]["matchConditions"][0]["expression"]
        .as_str()
        .unwrap();
    assert_eq!(
        condition,
        format!("(has(object.metadata.labels) && '{PROBE_LABEL}' in object.metadata.labels)")
    );
    assert_eq!(c.parts.len(), 1);
    assert!(c.head().binding["spec"].get("matchResources").is_none());
    assert_eq!(
        c.head().probe_labels,
        BTreeMap::from([(PROBE_LABEL.to_string(), opts().name)])
    );
}

#[test]
fn sidecarsets_past_the_api_servers_expression_limit_stay_on_the_webhook() {
    // The mutation refers to each SidecarSet a few times (a few hundred characters each).
    let sets: Vec<SidecarSet> = (0..600)
        .map(|i| {
            basic(
                &format!("s-{i:03}"),
                &format!("c-{i:03}"),
                &format!("app-{i}"),
            )
        })
        .collect();
    let c = compile(&index(sets), &opts());
    assert!(
        c.included.len() > 100 && c.included.len() < 600,
        "{}",
        c.included.len()
    );
    assert_eq!(c.included.len() + c.fallbacks.len(), 600);
    for p in &c.parts {
        for e in expressions(&p.policy["spec"]) {
            assert!(e.chars().count() <= MAX_EXPRESSION_CHARS, "{}", e.len());
        }
    }
    // The first ones by name are kept; the rest say why.
    assert_eq!(c.included[0], "s-000");
    assert!(
        c.fallbacks[0].reason.contains("100000 characters"),
        "{:?}",
        c.fallbacks[0]
    );
    // And a cap set by the operator.
    let capped = compile(
        &index(vec![
            basic("a", "x", "web"),
            basic("b", "cy", "web"),
            basic("c", "z", "web"),
        ]),
        &Options {
            max_sidecarsets: Some(2),
            ..opts()
        },
    );
    assert_eq!(capped.included, ["a", "b"]);
    assert!(capped.fallbacks[0].reason.contains("at most 2"));
}

#[test]
fn a_sidecarset_that_allows_opting_out_is_compiled_with_its_opt_out_labels() {
    let mut optional = basic("mesh", "proxy", "web");
    optional.metadata.annotations = Some(BTreeMap::from([(
        crate::api::ANNOTATION_OPT_OUT.to_string(),
        "allowed".to_string(),
    )]));
    let compiled = compile(
        &index(vec![optional, basic("logs", "agent", "web")]),
        &opts(),
    );
    assert_eq!(compiled.included, ["logs", "mesh"]);
    let scope = |n: usize| -> String {
        compiled.head().policy["spec"]["variables"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == format!("s{n}"))
            .unwrap()["expression"]
            .as_str()
            .unwrap()
            .to_string()
    };
    // logs (s0) is mandatory: no opt-out label in its test.
    assert!(
        !scope(0).contains("sidecarset-operator.io/inject"),
        "{}",
        scope(0)
    );
    // mesh (s1): declined by its own label or the general one, on the pod or its namespace.
    let s1 = scope(1);
    for want in [
        "!(has(object.metadata.labels) && (('inject.sidecarset-operator.io/mesh' in object.metadata.labels && object.metadata.labels['inject.sidecarset-operator.io/mesh'] == 'disabled') || ('sidecarset-operator.io/inject' in object.metadata.labels && object.metadata.labels['sidecarset-operator.io/inject'] == 'disabled')))",
        "!(has(namespaceObject.metadata.labels) && (('inject.sidecarset-operator.io/mesh' in namespaceObject.metadata.labels && namespaceObject.metadata.labels['inject.sidecarset-operator.io/mesh'] == 'disabled') || ('sidecarset-operator.io/inject' in namespaceObject.metadata.labels && namespaceObject.metadata.labels['sidecarset-operator.io/inject'] == 'disabled')))",
    ] {
        assert!(s1.contains(want), "{s1}\nshould contain\n{want}");
    }
}

/// The expression of the compiled policy's variable `name`.
fn variable(c: &Compiled, name: &str) -> Option<String> {
    c.head().policy["spec"]["variables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == name)
        .map(|v| v["expression"].as_str().unwrap().to_string())
}

#[test]
fn transferred_env_is_read_from_the_source_container_in_the_order_of_the_names() {
    let set = ss(
        "apiVersion: apps.kruise.io/v1alpha1\nkind: SidecarSet\nmetadata: {name: s}\nspec:\n  selector: {matchLabels: {app: a}}\n  containers:\n  - name: agent\n    image: i\n    env: [{name: A, value: own}]\n    transferEnv:\n    - {sourceContainerName: app, envNames: [B, A]}\n    - {sourceContainerNameFrom: {fieldRef: {fieldPath: \"metadata.labels['src']\"}}, envName: C}\n    - {sourceContainerNameFrom: {fieldRef: {fieldPath: \"metadata.annotations['x.io/src']\"}}, envName: D}\n    - {sourceContainerNameFrom: {fieldRef: {fieldPath: metadata.name}}, envName: E}\n  - name: hot\n    image: i\n    upgradeStrategy: {upgradeType: HotUpgrade, hotUpgradeEmptyImage: empty}\n    transferEnv: [{sourceContainerName: app, envName: B}]\n  - {name: plain, image: i}\n",
    );
    let c = compile(&index(vec![set]), &opts());
    assert_eq!(c.included, ["s"]);
    // By name, by label, by annotation; `metadata.name` (which the webhook cannot read
    // either) copies nothing.
    let env = variable(&c, "x0c0e").unwrap();
    let from = |cond: &str| format!("variables.containers.filter(a, {cond}).map(a, has(a.env) ? ");
    let parts: Vec<&str> = env.split(".flatten() : []).flatten()").collect();
    assert_eq!(parts.len(), 4, "{env}");
    assert!(parts[0].starts_with(&from("a.name == 'app'")), "{env}");
    assert!(
        parts[0].ends_with("['B', 'A'].map(n, a.env.filter(e, e.name == n))"),
        "{env}"
    );
    assert!(parts[1].contains(&from("has(object.metadata.labels) && 'src' in object.metadata.labels && a.name == object.metadata.labels['src']")), "{env}");
    assert!(parts[2].contains(&from("has(object.metadata.annotations) && 'x.io/src' in object.metadata.annotations && a.name == object.metadata.annotations['x.io/src']")), "{env}");
    assert_eq!(parts[3], "");
    assert_eq!(
        variable(&c, "x0c0n").unwrap(),
        "variables.x0c0e.map(x, x.name)"
    );
    // The sidecar's own env first, then the pod's whose names it lacks, each name once.
    let containers = variable(&c, "c0").unwrap();
    assert!(containers.contains("'env': dyn([dyn({'name': dyn('A'), 'value': dyn('own')}), dyn({'name': dyn('IS_INJECTED'), 'value': dyn('true')})] + variables.x0c0e.transformList(k, e, !(e.name in ['A', 'IS_INJECTED']) && variables.x0c0n.indexOf(e.name) == k, e))"), "{containers}");
    // A hot-upgrade pair: both get the env, before their two version vars.
    assert_eq!(containers.matches("variables.x0c1e.transformList(k, e, !(e.name in ['IS_INJECTED']) && variables.x0c1n.indexOf(e.name) == k, e) + [dyn({'name': dyn('SIDECARSET_VERSION')").count(), 2, "{containers}");
    // The plain sidecar stays a literal; nothing is shared, so no mounts are read.
    assert!(variable(&c, "x0c2e").is_none());
    assert!(variable(&c, "mounts").is_none());
    assert!(!variable(&c, "any").unwrap().contains("<= 1000"));
}

#[test]
fn shared_mounts_skip_the_sidecars_paths_and_name_the_sidecarsets_volumes() {
    let set = ss(
        "apiVersion: apps.kruise.io/v1alpha1\nkind: SidecarSet\nmetadata: {name: s}\nspec:\n  selector: {matchLabels: {app: a}}\n  initContainers:\n  - {name: prep, image: i, shareVolumePolicy: {type: enabled}}\n  containers:\n  - name: shipper\n    image: i\n    shareVolumePolicy: {type: enabled}\n    shareVolumeDevicePolicy: {type: enabled}\n    volumeMounts: [{name: own, mountPath: /own}]\n    volumeDevices: [{name: blk, devicePath: /dev/own}]\n  volumes: [{name: own, emptyDir: {}}, {name: extra, emptyDir: {}}, {name: own, hostPath: {path: /tmp}}]\n",
    );
    let other = basic("t", "other", "a");
    let c = compile(&index(vec![set, other]), &opts());
    assert_eq!(c.included, ["s", "t"]);
    assert_eq!(
        variable(&c, "x0c0m").unwrap(),
        "variables.mounts.transformList(k, m, !(m.mountPath in ['/own']) && variables.mountPaths.indexOf(m.mountPath) == k, k)"
    );
    assert_eq!(
        variable(&c, "x0c0d").unwrap(),
        "variables.devices.transformList(k, m, !(m.devicePath in ['/dev/own']) && variables.devicePaths.indexOf(m.devicePath) == k, k)"
    );
    assert_eq!(
        variable(&c, "x0i0m").unwrap(),
        "variables.mounts.transformList(k, m, variables.mountPaths.indexOf(m.mountPath) == k, k)"
    );
    // The subPathExpr's env of the mounts kept.
    assert_eq!(
        variable(&c, "x0c0e").unwrap(),
        "variables.x0c0m.map(k, variables.mountEnv[k]).flatten()"
    );
    let containers = variable(&c, "c0").unwrap();
    assert!(containers.contains("'volumeMounts': dyn([dyn({'mountPath': dyn('/own'), 'name': dyn('own')})] + variables.x0c0m.map(k, variables.mounts[k]))"), "{containers}");
    assert!(containers.contains("'volumeDevices': dyn([dyn({'devicePath': dyn('/dev/own'), 'name': dyn('blk')})] + variables.x0c0d.map(k, variables.devices[k]))"), "{containers}");
    // No mounts of its own: present only when something is shared.
    let init = variable(&c, "i0").unwrap();
    assert!(init.contains("?'volumeMounts': size(variables.x0i0m) > 0 ? optional.of(dyn(variables.x0i0m.map(k, variables.mounts[k]))) : optional.none()"), "{init}");
    // Volumes: init containers' first, of each its mounts then its devices; the first of a
    // name in the SidecarSet.
    assert_eq!(
        variable(&c, "vn0").unwrap(),
        "variables.x0i0m.map(k, variables.mounts[k].name) + ['own'] + variables.x0c0m.map(k, variables.mounts[k].name) + ['blk'] + variables.x0c0d.map(k, variables.devices[k].name)"
    );
    let map = variable(&c, "v0").unwrap();
    assert_eq!(map.matches("'own': ").count(), 1, "{map}");
    assert!(
        map.contains("'emptyDir'") && !map.contains("hostPath"),
        "{map}"
    );
    assert_eq!(
        variable(&c, "vall").unwrap(),
        "(variables.m0 ? variables.vn0.filter(n, n in variables.v0).map(n, variables.v0[n]) : [])"
    );
    // Shared from the pod's containers but injected sidecars; the pod's size bounded.
    assert!(variable(&c, "apps").unwrap().contains("'IS_INJECTED'"));
    assert!(
        variable(&c, "any")
            .unwrap()
            .ends_with(&format!(") <= {MAX_SHARED_MOUNTS}"))
    );
}

#[test]
fn sidecarsets_that_never_select_one_pod_go_into_parts_with_their_own_binding_selector() {
    let mut merge = basic("z-merge", "t", "api");
    merge.spec.patch_pod_metadata = vec![
        serde_json::from_value(
            json!({"annotations": {"a.io/x": "{}"}, "patchPolicy": "MergePatchJson"}),
        )
        .unwrap(),
    ];
    let idx = index(vec![
        basic("a-web", "proxy", "web"),
        basic("b-api", "proxy", "api"),
        basic("c-web", "logger", "web"),
        merge,
    ]);
    let c = compile(&idx, &opts());
    assert_eq!(c.included, ["a-web", "b-api", "c-web"]);
    let names: Vec<&str> = c.parts.iter().map(|p| p.name.as_str()).collect();
    let first = opts().name;
    assert_eq!(names, [first.clone(), format!("{first}-1")]);
    assert_eq!(c.parts[0].included, ["a-web", "c-web"]);
    assert_eq!(c.parts[1].included, ["b-api"]);
    for (part, app) in c.parts.iter().zip(["web", "api"]) {
        assert_eq!(part.binding["spec"]["policyName"], json!(part.name));
        assert_eq!(
            part.binding["spec"]["matchResources"]["objectSelector"],
            json!({"matchExpressions": [{"key": "app", "operator": "In", "values": [app]}]})
        );
        assert_eq!(part.probe_labels["app"], app);
        assert_eq!(part.probe_labels[PROBE_LABEL], part.name);
        let a = &part.policy["metadata"]["annotations"];
        assert_eq!(a[PROBE_ANNOTATION], json!(part.token));
        assert_eq!(a[PART_ANNOTATION], json!(part.included.join(",")));
        // Every part leaves whole to the webhook the pods the fallback could select.
        let vars = part.policy["spec"]["variables"].as_array().unwrap();
        let w0 = vars.iter().find(|v| v["name"] == "w0").unwrap();
        assert!(w0["expression"].as_str().unwrap().contains("== 'api'"));
        // A part answers only its own probe; it never injects a probe pod.
        let expr = part.policy["spec"]["mutations"][0]["jsonPatch"]["expression"]
            .as_str()
            .unwrap();
        assert!(
            expr.contains(&format!("['{PROBE_LABEL}'] == '{}'", part.name)),
            "{expr}"
        );
    }
    assert_ne!(c.parts[0].token, c.parts[1].token);
    // The first part names what the whole policy does, for the command line.
    let head: BTreeMap<String, String> =
        serde_json::from_value(c.head().policy["metadata"]["annotations"].clone()).unwrap();
    let modes = Modes::of_annotations(&head).unwrap();
    assert_eq!(modes, Modes::of_compiled(&c));
    assert_eq!(probe_labels_of(&head), Some(c.head().probe_labels.clone()));
    let other: BTreeMap<String, String> =
        serde_json::from_value(c.parts[1].policy["metadata"]["annotations"].clone()).unwrap();
    assert_eq!(Modes::of_annotations(&other), None);
}
