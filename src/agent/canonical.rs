//! Canonical JSON (RFC 8785, JCS) for fingerprints: object members sorted by their UTF-16 code
//! units, no white space, strings escaped as JSON requires and no more, integers as integers.
//!
//! Other numbers are written as JCS says (ECMAScript's `Number.prototype.toString`): the
//! shortest digits that round-trip, in plain notation from 1e-6 up to 1e21 and in exponent
//! notation outside it, `-0` as `0`. Integers that JSON gives exactly (any `i64` or `u64`)
//! stay exact rather than being rounded through a double (as JCS would above 2^53), so two
//! calls that differ in a large integer never share a fingerprint.

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
                write_double(n.as_f64().unwrap_or(0.0), out);
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

/// A double as ECMAScript's `Number.prototype.toString` writes it (RFC 8785, section 3.2.2.3).
/// JSON has no NaN or infinity, so neither reaches here.
fn write_double(f: f64, out: &mut String) {
    if f == 0.0 {
        // Both zeros.
        out.push('0');
        return;
    }
    if f < 0.0 {
        out.push('-');
    }
    // Rust's `{:e}` gives the shortest digits that round-trip: `d[.ddd]e[-]x`.
    let shortest = format!("{:e}", f.abs());
    let (mantissa, exponent) = shortest
        .split_once('e')
        .expect("{:e} always writes an exponent");
    let mut digits: String = mantissa.chars().filter(|&c| c != '.').collect();
    even_on_a_tie(f.abs(), exponent, &mut digits);
    let k = digits.len() as i64;
    // The decimal point goes after `n` digits: the value is 0.digits × 10^n.
    let n = exponent.parse::<i64>().expect("the exponent is a number") + 1;
    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        out.push_str(&digits[..n as usize]);
        out.push('.');
        out.push_str(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-n) as usize));
        out.push_str(&digits);
    } else {
        out.push_str(&digits[..1]);
        if k > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if n > 0 { '+' } else { '-' });
        out.push_str(&(n - 1).abs().to_string());
    }
}

/// When the value lies exactly halfway between two shortest decimals, ECMAScript takes the one
/// whose last digit is even; Rust's `{:e}` may take the other. `digits` and `exponent` are
/// Rust's shortest form of the positive `f`.
fn even_on_a_tie(f: f64, exponent: &str, digits: &mut String) {
    let last = digits.as_bytes()[digits.len() - 1];
    if last.is_multiple_of(2) {
        return;
    }
    // Every double's exact decimal expansion has at most 767 significant digits.
    let exact = format!("{f:.800e}");
    let Some((exact_mantissa, exact_exponent)) = exact.split_once('e') else {
        return;
    };
    if exact_exponent != exponent {
        return;
    }
    let exact_digits: String = exact_mantissa.chars().filter(|&c| c != '.').collect();
    let (prefix, tail) = exact_digits.split_at(digits.len());
    if !(tail.starts_with('5') && tail[1..].bytes().all(|b| b == b'0')) {
        return;
    }
    // A tie: the other candidate is one unit in the last digit away, on the other side.
    let other = if digits.as_str() > prefix {
        last - 1
    } else if last < b'9' {
        last + 1
    } else {
        return;
    };
    let mut candidate = digits.clone();
    candidate.pop();
    candidate.push(char::from(other));
    let text = format!("{}.{}e{exponent}", &candidate[..1], &candidate[1..]);
    if text.parse::<f64>() == Ok(f) {
        *digits = candidate.trim_end_matches('0').to_string();
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

    #[test]
    fn doubles_as_rfc_8785_writes_them() {
        // The IEEE 754 samples of RFC 8785, appendix B.
        for (bits, expect) in [
            (0x0000000000000000_u64, "0"),
            (0x8000000000000000, "0"),
            (0x0000000000000001, "5e-324"),
            (0x8000000000000001, "-5e-324"),
            (0x7fefffffffffffff, "1.7976931348623157e+308"),
            (0xffefffffffffffff, "-1.7976931348623157e+308"),
            (0x4340000000000000, "9007199254740992"),
            (0xc340000000000000, "-9007199254740992"),
            (0x4430000000000000, "295147905179352830000"),
            (0x44b52d02c7e14af5, "9.999999999999997e+22"),
            (0x44b52d02c7e14af6, "1e+23"),
            (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
            (0x444b1ae4d6e2ef4e, "999999999999999700000"),
            (0x444b1ae4d6e2ef4f, "999999999999999900000"),
            (0x444b1ae4d6e2ef50, "1e+21"),
            (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
            (0x3eb0c6f7a0b5ed8d, "0.000001"),
            (0x41b3de4355555553, "333333333.3333332"),
            (0x41b3de4355555554, "333333333.33333325"),
            (0x41b3de4355555555, "333333333.3333333"),
            (0x41b3de4355555556, "333333333.3333334"),
            (0x41b3de4355555557, "333333333.33333343"),
            (0xbecbf647612f3696, "-0.0000033333333333333333"),
            (0x43143ff3c1cb0959, "1424953923781206.2"),
        ] {
            let value = serde_json::Value::from(f64::from_bits(bits));
            assert_eq!(canonical_json(&value), expect, "{bits:#018x}");
        }
    }
}
