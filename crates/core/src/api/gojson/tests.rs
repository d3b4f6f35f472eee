use super::core_v1::{CONTAINER, GRPC_ACTION, HTTP_GET_ACTION, RESOURCE_FIELD_SELECTOR, VOLUME};
use super::kruise::SIDECAR_CONTAINER;
use super::*;
use serde_json::json;

fn go(ty: &Ty, v: Value) -> String {
    encode_struct(ty, Some(&v)).to_json(Numbers::Typed)
}

#[test]
fn fields_in_go_declaration_order() {
    // Given alphabetically (as serde writes them), written in the order Go declares them.
    let c = json!({"args": ["a"], "command": ["c"], "image": "i", "name": "n", "tty": true,
        "workingDir": "/w"});
    assert_eq!(
        go(&CONTAINER, c),
        r#"{"name":"n","image":"i","command":["c"],"args":["a"],"workingDir":"/w","resources":{},"tty":true}"#
    );
    // OpenKruise's fields come after the core container's.
    let sc = json!({"podInjectPolicy": "BeforeAppContainer", "name": "n", "stdin": true});
    assert_eq!(
        go(&SIDECAR_CONTAINER, sc),
        r#"{"name":"n","resources":{},"stdin":true,"podInjectPolicy":"BeforeAppContainer","upgradeStrategy":{},"shareVolumePolicy":{}}"#
    );
}

#[test]
fn omitempty_leaves_out_zero_values_but_never_structs() {
    let c = json!({"name": "n", "image": "", "stdin": false, "command": [], "ports": [],
        "env": [{"name": "E", "value": ""}], "resources": {"limits": {}}});
    // An empty string, false, an empty list or map are left out; `resources`, a struct, stays.
    assert_eq!(
        go(&CONTAINER, c),
        r#"{"name":"n","env":[{"name":"E"}],"resources":{}}"#
    );
    // A port's `hostPort: 0` (omitempty int) goes, its `containerPort: 0` (no omitempty) stays.
    let c = json!({"name": "n", "ports": [{"hostPort": 0, "containerPort": 0}]});
    assert!(go(&CONTAINER, c).contains(r#""ports":[{"containerPort":0}]"#));
}

#[test]
fn set_pointers_are_kept_even_at_zero() {
    // `restartPolicy` and `runAsUser` are pointers: "" and 0 are written.
    let c = json!({"name": "n", "restartPolicy": "",
        "securityContext": {"runAsUser": 0, "privileged": false}});
    assert_eq!(
        go(&CONTAINER, c),
        r#"{"name":"n","resources":{},"restartPolicy":"","securityContext":{"privileged":false,"runAsUser":0}}"#
    );
}

#[test]
fn absent_fields_without_omitempty_are_zero_or_null() {
    // GRPCAction.service is a pointer without omitempty: null; its port a plain int: 0.
    assert_eq!(go(&GRPC_ACTION, json!({})), r#"{"port":0,"service":null}"#);
    // HTTPGetAction.port is an IntOrString struct: 0 when absent; a number or a string else.
    assert_eq!(go(&HTTP_GET_ACTION, json!({})), r#"{"port":0}"#);
    assert_eq!(
        go(&HTTP_GET_ACTION, json!({"port": "http"})),
        r#"{"port":"http"}"#
    );
    assert_eq!(
        go(&HTTP_GET_ACTION, json!({"port": 8080})),
        r#"{"port":8080}"#
    );
    // A Quantity struct: "0" when absent, even with omitempty.
    assert_eq!(
        go(&RESOURCE_FIELD_SELECTOR, json!({"resource": "limits.cpu"})),
        r#"{"resource":"limits.cpu","divisor":"0"}"#
    );
    // A zero metav1.Time is null (OpenKruise v1.9's apimachinery has no omitzero yet).
    let v = json!({"name": "v", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}});
    assert!(go(&VOLUME, v).contains(r#""metadata":{"creationTimestamp":null}"#));
}

#[test]
fn quantities_are_canonical_and_map_keys_sorted() {
    let c = json!({"name": "n", "resources": {
        "requests": {"memory": "1.5Gi", "cpu": "0.1", "a.example/x": "1000"}}});
    assert_eq!(
        go(&CONTAINER, c),
        r#"{"name":"n","resources":{"requests":{"a.example/x":"1k","cpu":"100m","memory":"1536Mi"}}}"#
    );
}

#[test]
fn strings_are_escaped_as_go_does() {
    let c = json!({"name": "n", "command": ["<a>&b", "\"q\"\\", "\n\r\t\u{8}\u{c}\u{1}\u{1f}",
        "\u{2028}\u{2029}", "é漢😀\u{7f}"]});
    assert_eq!(
        go(&CONTAINER, c),
        r#"{"name":"n","command":["\u003ca\u003e\u0026b","\"q\"\\","\n\r\t\b\f\u0001\u001f","\u2028\u2029","é漢😀"#
            .to_string()
            + "\u{7f}"
            + r#""],"resources":{}}"#
    );
}

#[test]
fn unknown_keys_are_appended_sorted() {
    // Fields no table knows (a newer Kubernetes): after the known ones, sorted, generic JSON
    // with sorted keys; nested in a known struct too.
    let c = json!({"zeta": 1, "name": "n", "alpha": {"y": [true, null], "b": "<"},
        "securityContext": {"futureField": "x", "runAsUser": 1}});
    assert_eq!(
        go(&CONTAINER, c),
        r#"{"name":"n","resources":{},"securityContext":{"runAsUser":1,"futureField":"x"},"alpha":{"b":"\u003c","y":[true,null]},"zeta":1}"#
    );
}

#[test]
fn nil_and_empty_slices() {
    assert_eq!(
        encode_slice(&CONTAINER, None).to_json(Numbers::Typed),
        "null"
    );
    assert_eq!(
        encode_slice(&CONTAINER, Some(&[])).to_json(Numbers::Typed),
        "[]"
    );
}

#[test]
fn numbers_as_float64() {
    assert_eq!(go_float(0.0), "0");
    assert_eq!(go_float(420.0), "420");
    assert_eq!(go_float(-3.5), "-3.5");
    assert_eq!(go_float(1e20), "100000000000000000000");
    assert_eq!(go_float(1e21), "1e+21");
    assert_eq!(go_float(1.5e300), "1.5e+300");
    assert_eq!(go_float(1e-7), "1e-7");
    assert_eq!(go_float(2.5e-10), "2.5e-10");
    assert_eq!(go_float(0.000001), "0.000001");
    let big = Go::Num(9_007_199_254_740_993i64.into());
    assert_eq!(big.to_json(Numbers::Typed), "9007199254740993");
    // A float64 cannot hold 2^53+1.
    assert_eq!(big.to_json(Numbers::Float64), "9007199254740992");
}

#[test]
fn sorted_sorts_every_level() {
    let v = encode_struct(
        &CONTAINER,
        Some(&json!({"name": "n", "env": [{"value": "v", "name": "e"}]})),
    );
    assert_eq!(
        v.sorted().to_json(Numbers::Float64),
        r#"{"env":[{"name":"e","value":"v"}],"name":"n","resources":{}}"#
    );
}

/// tests/fixtures/gojson/golden.tsv: inputs and what Go's encoding/json writes for them once
/// decoded into the Go structs; both from the input as given and from our serde types.
#[test]
fn matches_go_encoding_json() {
    let table = include_str!("../../../tests/fixtures/gojson/golden.tsv");
    let (mut n, mut through_types) = (0, 0);
    for line in table
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (input, want) = line.split_once('\t').unwrap();
        let input: Value = serde_json::from_str(input).unwrap();
        let (kind, raw) = (input["kind"].as_str().unwrap(), &input["value"]);
        let ty = match kind {
            "container" => &SIDECAR_CONTAINER,
            _ => &VOLUME,
        };
        assert_eq!(go(ty, raw.clone()), want, "{raw}");
        // Through our types, as the hash and the revision data see it (our types refuse a few
        // values Go takes as empty, such as `podInjectPolicy: ""`, which defaulting never
        // leaves; and have no resourcesPolicy yet: see the README).
        let typed = match kind {
            "container" if raw.get("resourcesPolicy").is_some() => None,
            "container" => serde_json::from_value::<crate::api::SidecarContainer>(raw.clone())
                .ok()
                .map(|t| serde_json::to_value(t).unwrap()),
            _ => serde_json::from_value::<k8s_openapi::api::core::v1::Volume>(raw.clone())
                .ok()
                .map(|t| serde_json::to_value(t).unwrap()),
        };
        if let Some(typed) = typed {
            assert_eq!(go(ty, typed), want, "{raw} through our types");
            through_types += 1;
        }
        n += 1;
    }
    assert!(n >= 25, "golden table too short");
    assert!(
        through_types >= 22,
        "too few through our types: {through_types}"
    );
}
