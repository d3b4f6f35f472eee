//! CEL text for the values a compiled policy carries: strings, JSON values as CEL literals the
//! API server's type checker accepts, and JSON pointers.

use serde_json::Value;

/// A CEL string literal (single-quoted; backslash, quote and control characters escaped).
pub fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// A JSON value as a CEL literal. The API server's CEL requires the elements of a list literal
/// and the values of a map literal to have one type, so each is wrapped in `dyn()`: the
/// JSONPatch value is then the JSON value itself.
pub fn value(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.to_string(),
            (None, Some(u)) => format!("{u}u"),
            // Pod fields carry no floats; print one so CEL reads it as a double.
            _ => format!("{:?}", n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => string(s),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(|x| format!("dyn({})", value(x))).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(m) => {
            let fields: Vec<String> = m
                .iter()
                .map(|(k, x)| format!("{}: dyn({})", string(k), value(x)))
                .collect();
            format!("{{{}}}", fields.join(", "))
        }
    }
}

/// A JSON pointer token (RFC 6901): `~` as `~0`, `/` as `~1`.
pub fn pointer_token(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strings_are_escaped() {
        for (input, want) in [
            ("plain", "'plain'"),
            ("it's", r"'it\'s'"),
            (r"a\b", r"'a\\b'"),
            ("{\"a\":1}", "'{\"a\":1}'"),
            ("l1\nl2\t\u{1}", r"'l1\nl2\t\u0001'"),
            ("ü", "'ü'"),
        ] {
            assert_eq!(string(input), want, "{input:?}");
        }
    }

    #[test]
    fn values_are_literals_of_one_type_per_list_and_map() {
        for (input, want) in [
            (json!(null), "null"),
            (json!(true), "true"),
            (json!(80), "80"),
            (json!(-1), "-1"),
            (json!(1.5), "1.5"),
            (json!("x"), "'x'"),
            (json!([]), "[]"),
            (json!({}), "{}"),
            (json!([1, "a"]), "[dyn(1), dyn('a')]"),
            (
                json!({"name": "c", "ports": [{"containerPort": 80}]}),
                "{'name': dyn('c'), 'ports': dyn([dyn({'containerPort': dyn(80)})])}",
            ),
        ] {
            assert_eq!(value(&input), want, "{input}");
        }
    }

    #[test]
    fn pointer_tokens_are_escaped() {
        assert_eq!(pointer_token("kruise.io/x"), "kruise.io~1x");
        assert_eq!(pointer_token("a~b/c"), "a~0b~1c");
    }
}
