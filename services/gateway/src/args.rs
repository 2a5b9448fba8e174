//! Tool arguments, validated by hand so that every bad argument becomes a
//! readable tool result instead of a JSON-RPC error.
//!
//! Conversion rules (documented for callers in the tool descriptions):
//!
//! * An argument that is absent takes its default. An argument that is
//!   present is used as given, `null` included: `null` is not "the default"
//!   (the one exception is `gate_contract`, whose default is `null`).
//! * Numbers follow Python's `float()` / `int()`, which is what the reference
//!   implementation applies: JSON numbers, booleans (`true` = 1) and numeric
//!   strings (surrounding whitespace, `_` digit separators, `inf`/`nan` for
//!   floats) are accepted; an integer parameter given a fractional number
//!   truncates toward zero, but a fractional *string* is refused, as
//!   `int("2.5")` is. A value that cannot be converted yields Python's own
//!   message, e.g. `could not convert string to float: 'abc'`.
//! * Text parameters must be JSON strings (`"<name> must be text"`).
//! * Unknown argument names are refused, naming the accepted ones, so a typo
//!   (`max_iteration`) is not silently ignored.

use serde_json::{Map, Value};

/// Longest string quoted back in a conversion error.
const MAX_QUOTED_CHARS: usize = 200;

pub struct Args<'a> {
    map: &'a Map<String, Value>,
}

impl<'a> Args<'a> {
    pub fn new(map: &'a Map<String, Value>) -> Self {
        Self { map }
    }

    /// Refuses argument names outside `accepted`.
    pub fn only(&self, accepted: &[&str]) -> Result<(), String> {
        let mut unknown: Vec<&str> = self
            .map
            .keys()
            .map(String::as_str)
            .filter(|k| !accepted.contains(k))
            .collect();
        if unknown.is_empty() {
            return Ok(());
        }
        unknown.sort_unstable();
        let shown: Vec<String> = unknown.iter().map(|k| quote(k)).collect();
        Err(format!(
            "unexpected argument{} {} (this tool takes: {})",
            if unknown.len() == 1 { "" } else { "s" },
            shown.join(", "),
            accepted.join(", ")
        ))
    }

    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key)
    }

    /// A text argument; None when absent.
    pub fn text(&self, key: &str) -> Result<Option<&'a str>, String> {
        match self.map.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(_) => Err(format!("{key} must be text")),
        }
    }

    pub fn float(&self, key: &str, default: f64) -> Result<f64, String> {
        self.map.get(key).map_or(Ok(default), py_float)
    }

    pub fn int(&self, key: &str, default: i128) -> Result<i128, String> {
        self.map.get(key).map_or(Ok(default), py_int)
    }

    pub fn boolean(&self, key: &str, default: bool) -> Result<bool, String> {
        match self.map.get(key) {
            None => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(Value::Number(n)) => Ok(n.as_f64().is_some_and(|f| f != 0.0)),
            Some(Value::String(s)) => match s.trim().to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" => Ok(true),
                "false" | "0" | "no" | "" => Ok(false),
                _ => Err(format!("{key} must be true or false")),
            },
            Some(_) => Err(format!("{key} must be true or false")),
        }
    }

    /// A list of text; a single string counts as a one-element list.
    pub fn text_list(&self, key: &str) -> Result<Vec<String>, String> {
        match self.map.get(key) {
            None => Ok(Vec::new()),
            Some(Value::String(s)) => Ok(vec![s.clone()]),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s.clone()),
                    _ => Err(format!("{key} must be a list of text")),
                })
                .collect(),
            Some(_) => Err(format!("{key} must be a list of text")),
        }
    }
}

/// Python's type name of a JSON value, as `float()`/`int()` report it.
fn py_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

/// Python's `repr()` of a string (shortened when very long).
pub fn py_repr(s: &str) -> String {
    let shown: String;
    let s = if s.chars().count() > MAX_QUOTED_CHARS {
        shown = s.chars().take(MAX_QUOTED_CHARS).collect::<String>() + "…";
        shown.as_str()
    } else {
        s
    };
    let q = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(q);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == q => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if c.is_control() => {
                let n = c as u32;
                if n <= 0xff {
                    out.push_str(&format!("\\x{n:02x}"));
                } else {
                    out.push_str(&format!("\\u{n:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push(q);
    out
}

fn quote(s: &str) -> String {
    py_repr(s)
}

/// Python's `str.strip()` whitespace.
fn py_strip(s: &str) -> &str {
    s.trim_matches(|c: char| c.is_whitespace() || ('\x1c'..='\x1f').contains(&c))
}

/// Digits with single `_` separators between them (Python numeric literals).
fn digits_ok(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('_')
        && !s.ends_with('_')
        && !s.contains("__")
        && s.chars().all(|c| c.is_ascii_digit() || c == '_')
}

/// Python's `float(value)` for a JSON value.
pub fn py_float(v: &Value) -> Result<f64, String> {
    match v {
        Value::Bool(b) => Ok(if *b { 1.0 } else { 0.0 }),
        Value::Number(n) => n
            .as_f64()
            .ok_or_else(|| "float() argument is out of range".to_string()),
        Value::String(s) => parse_py_float(s)
            .ok_or_else(|| format!("could not convert string to float: {}", py_repr(s))),
        other => Err(format!(
            "float() argument must be a string or a real number, not '{}'",
            py_type(other)
        )),
    }
}

fn parse_py_float(raw: &str) -> Option<f64> {
    let s = py_strip(raw);
    let unsigned = s.strip_prefix(['+', '-']).unwrap_or(s);
    let lower = unsigned.to_ascii_lowercase();
    if matches!(lower.as_str(), "inf" | "infinity" | "nan") {
        let v = if lower == "nan" {
            f64::NAN
        } else {
            f64::INFINITY
        };
        return Some(if s.starts_with('-') { -v } else { v });
    }
    let (mantissa, exponent) = match lower.find('e') {
        Some(i) => (&lower[..i], Some(&lower[i + 1..])),
        None => (lower.as_str(), None),
    };
    let (int_part, frac_part) = match mantissa.find('.') {
        Some(i) => (&mantissa[..i], Some(&mantissa[i + 1..])),
        None => (mantissa, None),
    };
    let int_ok = int_part.is_empty() || digits_ok(int_part);
    let frac_ok = match frac_part {
        None => true,
        Some(f) => f.is_empty() || digits_ok(f),
    };
    let has_digits = !int_part.is_empty() || frac_part.is_some_and(|f| !f.is_empty());
    let exp_ok = match exponent {
        None => true,
        Some(e) => digits_ok(e.strip_prefix(['+', '-']).unwrap_or(e)),
    };
    if !(int_ok && frac_ok && has_digits && exp_ok) {
        return None;
    }
    let cleaned: String = s.chars().filter(|c| *c != '_').collect();
    cleaned.parse::<f64>().ok()
}

/// Python's `int(value)` for a JSON value (saturating far outside i128,
/// which every caller clamps anyway).
pub fn py_int(v: &Value) -> Result<i128, String> {
    match v {
        Value::Bool(b) => Ok(i128::from(*b)),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Ok(i128::from(i))
            } else if let Some(u) = n.as_u64() {
                Ok(i128::from(u))
            } else {
                float_to_int(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Value::String(s) => parse_py_int(s)
            .ok_or_else(|| format!("invalid literal for int() with base 10: {}", py_repr(s))),
        other => Err(format!(
            "int() argument must be a string, a bytes-like object or a real number, not '{}'",
            py_type(other)
        )),
    }
}

fn float_to_int(f: f64) -> Result<i128, String> {
    if f.is_nan() {
        Err("cannot convert float NaN to integer".into())
    } else if f.is_infinite() {
        Err("cannot convert float infinity to integer".into())
    } else {
        // `as` saturates; truncation toward zero is Python's int(float).
        Ok(f.trunc() as i128)
    }
}

fn parse_py_int(raw: &str) -> Option<i128> {
    let s = py_strip(raw);
    let (negative, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if !digits_ok(digits) {
        return None;
    }
    let mut n: i128 = 0;
    for c in digits.chars().filter(|c| *c != '_') {
        let d = i128::from(c.to_digit(10)? as u8);
        n = n.saturating_mul(10).saturating_add(d);
    }
    Some(if negative { -n } else { n })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn floats_like_python() {
        assert_eq!(py_float(&json!(1)), Ok(1.0));
        assert_eq!(py_float(&json!(2.5)), Ok(2.5));
        assert_eq!(py_float(&json!(true)), Ok(1.0));
        assert_eq!(py_float(&json!(" 1_000.5 ")), Ok(1000.5));
        assert_eq!(py_float(&json!("1e3")), Ok(1000.0));
        assert_eq!(py_float(&json!(".5")), Ok(0.5));
        assert_eq!(py_float(&json!("5.")), Ok(5.0));
        assert_eq!(py_float(&json!("-Infinity")), Ok(f64::NEG_INFINITY));
        assert!(py_float(&json!("nan")).unwrap().is_nan());
        assert_eq!(
            py_float(&json!("abc")),
            Err("could not convert string to float: 'abc'".into())
        );
        assert_eq!(
            py_float(&json!("")),
            Err("could not convert string to float: ''".into())
        );
        for bad in ["1__0", "_1", "1_", ".", "e5", "1e", "1.2.3", "0x10", "1 2"] {
            assert!(py_float(&json!(bad)).is_err(), "{bad}");
        }
        assert_eq!(
            py_float(&json!("it's")),
            Err("could not convert string to float: \"it's\"".into())
        );
        assert_eq!(
            py_float(&Value::Null),
            Err("float() argument must be a string or a real number, not 'NoneType'".into())
        );
        assert_eq!(
            py_float(&json!([1])),
            Err("float() argument must be a string or a real number, not 'list'".into())
        );
        assert_eq!(
            py_float(&json!({})),
            Err("float() argument must be a string or a real number, not 'dict'".into())
        );
    }

    #[test]
    fn ints_like_python() {
        assert_eq!(py_int(&json!(7)), Ok(7));
        assert_eq!(py_int(&json!(2.9)), Ok(2));
        assert_eq!(py_int(&json!(-2.9)), Ok(-2));
        assert_eq!(py_int(&json!(false)), Ok(0));
        assert_eq!(py_int(&json!(" +1_0 ")), Ok(10));
        assert_eq!(py_int(&json!(u64::MAX)), Ok(i128::from(u64::MAX)));
        assert_eq!(py_int(&json!(1e300)), Ok(i128::MAX));
        assert_eq!(
            py_int(&json!("2.5")),
            Err("invalid literal for int() with base 10: '2.5'".into())
        );
        assert_eq!(
            py_int(&json!("x\ny")),
            Err("invalid literal for int() with base 10: 'x\\ny'".into())
        );
        assert_eq!(
            py_int(&Value::Null),
            Err(
                "int() argument must be a string, a bytes-like object or a real number, not 'NoneType'"
                    .into()
            )
        );
    }

    #[test]
    fn repr_escapes_and_shortens() {
        assert_eq!(py_repr("a\0b"), "'a\\x00b'");
        assert_eq!(py_repr("a'b\"c"), "'a\\'b\"c'");
        let long = "x".repeat(1000);
        assert_eq!(py_repr(&long).chars().count(), MAX_QUOTED_CHARS + 3);
    }

    #[test]
    fn unknown_arguments_are_named() {
        let m = json!({"name": "a", "max_iteration": 3, "zz": 1});
        let args = Args::new(m.as_object().unwrap());
        assert_eq!(
            args.only(&["name", "max_iterations"]),
            Err("unexpected arguments 'max_iteration', 'zz' (this tool takes: name, max_iterations)".into())
        );
        assert!(args.only(&["name", "max_iteration", "zz"]).is_ok());
    }
}
