//! The writers against what PyYAML 6.0.3 and Python's json module wrote for the same values
//! (testdata/, recorded with the representer the bundle generator used in Python: block style,
//! sort_keys=False, width=100000, `|` for strings with a newline).

use super::*;

fn from_json(text: &str) -> Value {
    serde_json::from_str(text).expect("test input is JSON")
}

#[test]
fn yaml_is_pyyamls_byte_for_byte() {
    let input = from_json(include_str!("../testdata/pyyaml-input.json"));
    let want = include_str!("../testdata/pyyaml-output.yaml");
    let got = to_pyyaml(&input).unwrap();
    for (i, (g, w)) in got.lines().zip(want.lines()).enumerate() {
        assert_eq!(g, w, "line {} differs", i + 1);
    }
    assert_eq!(got, want);
}

#[test]
fn yaml_root_scalar_with_kept_newlines_ends_the_document() {
    let got = to_pyyaml(&Value::Str("a\n\n".into())).unwrap();
    assert_eq!(got, include_str!("../testdata/pyyaml-root-keep.yaml"));
}

#[test]
fn json_is_pythons_json_dumps_indent_2() {
    let input = from_json(include_str!("../testdata/python-json-input.json"));
    assert_eq!(
        to_python_json(&input),
        include_str!("../testdata/python-json-output.json")
    );
}

#[test]
fn yaml_refuses_a_key_it_cannot_write_simply() {
    for key in ["", "a\nb", &"k".repeat(123)] {
        let v = Value::Map(map![(key, "v")]);
        let err = to_pyyaml(&v).unwrap_err().to_string();
        assert!(err.contains("is not a simple key"), "{key:?}: {err}");
    }
    // 122 characters is still a simple key.
    assert!(to_pyyaml(&Value::Map(map![("k".repeat(122), "v")])).is_ok());
}

#[test]
fn map_insert_keeps_the_position_of_a_present_key() {
    let mut m = map![("a", 1), ("b", 2), ("c", 3)];
    m.insert("b", 20);
    m.insert("d", 4);
    m.remove("a");
    let keys: Vec<&str> = m.iter().map(|(k, _)| k).collect();
    assert_eq!(keys, ["b", "c", "d"]);
    assert_eq!(m.get("b"), Some(&Value::Int(20)));
}

#[test]
fn yaml_reads_documents_in_order_and_skips_empty_ones() {
    let docs = parse_yaml_all(
        "---\n# only a comment\n---\nb: 1\na: [x, 'y']\n---\n{}\n---\nc: ~\n",
        "t",
    )
    .unwrap();
    assert_eq!(docs.len(), 2, "{docs:?}");
    let keys: Vec<&str> = docs[0].as_map().unwrap().iter().map(|(k, _)| k).collect();
    assert_eq!(keys, ["b", "a"]);
    assert_eq!(docs[1].as_map().unwrap().get("c"), Some(&Value::Null));
}

#[test]
fn node_errors_name_the_path() {
    let v = parse_yaml(
        "spec:\n  template:\n    containers:\n    - name: a\n",
        "the Deployment",
    )
    .unwrap();
    let root = Node::root(&v, "the Deployment");
    let c = &root
        .get("spec")
        .unwrap()
        .get("template")
        .unwrap()
        .get("containers")
        .unwrap()
        .items()
        .unwrap()[0];
    let err = c.get("image").unwrap_err().to_string();
    assert_eq!(
        err,
        "the Deployment: spec.template.containers[0] has no field 'image'"
    );
    let err = c.get("name").unwrap().int().unwrap_err().to_string();
    assert_eq!(
        err,
        "the Deployment: spec.template.containers[0].name is not an integer"
    );
}

#[test]
fn python_float_repr_matches_python() {
    // repr() of these floats in CPython 3.
    for (f, want) in [
        (1.5, "1.5"),
        (100.0, "100.0"),
        (0.1, "0.1"),
        (1e20, "1e+20"),
        (1e-7, "1e-07"),
        (0.0001, "0.0001"),
        (1e16, "1e+16"),
        (1234567890123456.0, "1234567890123456.0"),
        (-2.5e-5, "-2.5e-05"),
        (0.0, "0.0"),
    ] {
        assert_eq!(python_float_repr(f), want, "{f}");
    }
}

#[test]
fn yaml_scalars_read_as_yaml_1_1() {
    // What PyYAML's safe_load (and Kubernetes) read for these plain scalars.
    let v = parse_yaml(
        "octal: 0440\nint: 440\nyes: yes\noff: off\nver: 1.29.0\nf: 1.5\ns: '0440'\n",
        "t",
    )
    .unwrap();
    let m = v.as_map().unwrap();
    assert_eq!(m.get("octal"), Some(&Value::Int(288)));
    assert_eq!(m.get("int"), Some(&Value::Int(440)));
    assert_eq!(m.get("yes"), Some(&Value::Bool(true)));
    assert_eq!(m.get("off"), Some(&Value::Bool(false)));
    assert_eq!(m.get("ver"), Some(&Value::Str("1.29.0".into())));
    assert_eq!(m.get("f"), Some(&Value::Float(1.5)));
    assert_eq!(m.get("s"), Some(&Value::Str("0440".into())));
    let err = parse_yaml("a: 1\na: 2\n", "the CRD")
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("the CRD: not valid YAML"), "{err}");
}
