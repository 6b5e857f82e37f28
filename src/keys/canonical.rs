//! Canonical JSON (RFC 8785, JCS) for fingerprints: object members sorted by their UTF-16 code
//! units, no white space, strings escaped as JSON requires and no more, integers as integers.
//!
//! Numbers other than integers are written in Rust's shortest round-trip form, which agrees
//! with JCS for every value a tool argument takes; the tools' schemas admit no fractions.

use serde_json::Value;

/// The canonical serialisation of `value`.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write(value, &mut out);
    out
}

fn write(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                out.push_str(&i.to_string());
            } else if let Some(u) = n.as_u64() {
                out.push_str(&u.to_string());
            } else {
                let f = n.as_f64().unwrap_or(0.0);
                if f.fract() == 0.0 && f.abs() < 1e21 {
                    out.push_str(&format!("{f:.0}"));
                } else {
                    out.push_str(&f.to_string());
                }
            }
        }
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut members: Vec<(&String, &Value)> = map.iter().collect();
            members.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
            out.push('{');
            for (i, (key, item)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write(item, out);
            }
            out.push('}');
        }
    }
}

fn write_string(s: &str, out: &mut String) {
    // serde_json escapes exactly what JCS requires: `"`, `\`, and control characters (with the
    // short forms \b \f \n \r \t and lowercase \u00xx otherwise), leaving all else literal.
    out.push_str(&serde_json::to_string(s).expect("a string always serialises"));
}

#[cfg(test)]
mod tests {
    use super::canonical_json;
    use serde_json::json;

    #[test]
    fn key_order_and_escapes_do_not_matter() {
        let a: serde_json::Value =
            serde_json::from_str(r#"{"top_k":5,"query":"café"}"#).expect("json");
        let b: serde_json::Value =
            serde_json::from_str(r#"{"query":"caf\u00e9","top_k":5}"#).expect("json");
        assert_eq!(canonical_json(&a), canonical_json(&b));
        assert_eq!(canonical_json(&a), r#"{"query":"café","top_k":5}"#);
    }

    #[test]
    fn nested_and_special() {
        assert_eq!(
            canonical_json(&json!({"b": [1, true, null], "a": {"d": "x\ny", "c": 1.0}})),
            r#"{"a":{"c":1,"d":"x\ny"},"b":[1,true,null]}"#
        );
        // Sorted by UTF-16 code units: U+1F600 (the surrogates D83D DE00) sorts before U+E000,
        // though its code point is larger.
        assert_eq!(
            canonical_json(&json!({"\u{E000}": 2, "\u{1F600}": 1})),
            "{\"\u{1F600}\":1,\"\u{E000}\":2}"
        );
    }
}
