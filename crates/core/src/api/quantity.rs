//! Kubernetes resource quantities in the form Go's `resource.Quantity` writes them.
//!
//! OpenKruise decodes a SidecarSet into Go structs before it hashes it, so `cpu: "0.1"` is hashed
//! (and stored) as `"100m"`. The rules, as in k8s.io/apimachinery's `ParseQuantity` and
//! `MarshalJSON`:
//!
//! * the value is parsed with its suffix: decimal SI (`n u m "" k M G T P E`), binary SI
//!   (`Ki Mi Gi Ti Pi Ei`) or a decimal exponent (`e3`, `E-2`); values below a nano are rounded up
//!   (away from zero) to a nano, binary ones are capped at 2^63-1;
//! * a string that is already short and plain is kept exactly as written (for decimal suffixes:
//!   the exponent a multiple of 3, no trailing `000`, not starting with `0.`; for binary ones: a
//!   power of 1024 suffix and a number not a multiple of 8) — so `"+1"` and `"01"` stay as they
//!   are;
//! * otherwise the number is written as an integer with the largest suffix of its kind that keeps
//!   it exact (`1.5` → `1500m`, `1.5Gi` → `1536Mi`, `1000` → `1k`), a binary value below 1024 or
//!   not whole in decimal SI;
//! * resource requirements are also rounded up to a milli when defaulted (`0.0001` → `1m`).
//!
//! `tests/fixtures/quantity/golden.tsv` holds what the Go code answers for a few hundred inputs
//! (hack/golden/quantity makes it).

use std::cmp::Ordering;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    DecimalExponent,
    BinarySI,
    DecimalSI,
}

/// A parsed quantity: the value `m × 10^e`, its format, and the string Go keeps when the input
/// was already in canonical form.
#[derive(Clone, Debug)]
struct Quantity {
    m: i128,
    e: i32,
    format: Format,
    kept: Option<String>,
}

const NANO: i32 = -9;
const MILLI: i32 = -3;

/// The quantity as Go writes it, or `None` when Go would refuse to parse it (or it is beyond
/// what these 128-bit integers hold).
pub fn canonical(s: &str) -> Option<String> {
    parse(s).and_then(|q| q.to_go_string())
}

/// The quantity as OpenKruise (and the API server) store a resource requirement: rounded up to
/// a milli, then written as Go does.
pub fn canonical_resource(s: &str) -> Option<String> {
    parse(s)
        .and_then(|q| q.round_up(MILLI))
        .and_then(|q| q.to_go_string())
}

fn pow10(k: u32) -> Option<i128> {
    10i128.checked_pow(k)
}

/// `m / 10^k`, rounded away from zero; and whether it was exact.
fn div_pow10_away(m: i128, k: u32) -> (i128, bool) {
    let Some(p) = pow10(k) else {
        // 10^k exceeds any i128: the quotient is 0 with all of m as remainder.
        return (m.signum(), m == 0);
    };
    let (q, r) = (m / p, m % p);
    if r == 0 {
        (q, true)
    } else {
        (q + m.signum(), false)
    }
}

struct Split<'a> {
    positive: bool,
    value: &'a str,
    num: &'a str,
    denom: &'a str,
    suffix: &'a str,
}

/// Go's `parseQuantityString`: sign, number (leading zeros stripped from the numerator), and
/// suffix.
fn split(s: &str) -> Option<Split<'_>> {
    let b = s.as_bytes();
    let end = b.len();
    let mut out = Split {
        positive: true,
        value: "",
        num: "",
        denom: "",
        suffix: "",
    };
    let mut pos = 0;
    if pos < end {
        match b[0] {
            b'-' => {
                out.positive = false;
                pos += 1;
            }
            b'+' => pos += 1,
            _ => {}
        }
    }
    loop {
        if pos >= end {
            out.num = "0";
            out.value = "0";
            return Some(out);
        }
        if b[pos] == b'0' {
            pos += 1;
        } else {
            break;
        }
    }
    let start = pos;
    let mut i = pos;
    loop {
        if i >= end {
            out.num = &s[start..end];
            out.value = s;
            return Some(out);
        }
        if !b[i].is_ascii_digit() {
            out.num = &s[start..i];
            pos = i;
            break;
        }
        i += 1;
    }
    if out.num.is_empty() {
        out.num = "0";
    }
    if pos < end && b[pos] == b'.' {
        pos += 1;
        let start = pos;
        let mut i = pos;
        loop {
            if i >= end {
                out.denom = &s[start..end];
                out.value = s;
                return Some(out);
            }
            if !b[i].is_ascii_digit() {
                out.denom = &s[start..i];
                pos = i;
                break;
            }
            i += 1;
        }
    }
    out.value = &s[..pos];
    let suffix_start = pos;
    let mut i = pos;
    loop {
        if i >= end {
            out.suffix = &s[suffix_start..end];
            return Some(out);
        }
        if !b"eEinumkKMGTP".contains(&b[i]) {
            pos = i;
            break;
        }
        i += 1;
    }
    if pos < end && matches!(b[pos], b'-' | b'+') {
        pos += 1;
    }
    for &c in &b[pos..] {
        if !c.is_ascii_digit() {
            // Not a suffix nor an exponent.
            return None;
        }
    }
    out.suffix = &s[suffix_start..end];
    Some(out)
}

/// (base, exponent, format) of a suffix.
fn interpret(suffix: &str) -> Option<(u32, i32, Format)> {
    let dec = |e| Some((10, e, Format::DecimalSI));
    let bin = |e| Some((2, e, Format::BinarySI));
    match suffix {
        "n" => dec(-9),
        "u" => dec(-6),
        "m" => dec(-3),
        "" => dec(0),
        "k" => dec(3),
        "M" => dec(6),
        "G" => dec(9),
        "T" => dec(12),
        "P" => dec(15),
        "E" => dec(18),
        "Ki" => bin(10),
        "Mi" => bin(20),
        "Gi" => bin(30),
        "Ti" => bin(40),
        "Pi" => bin(50),
        "Ei" => bin(60),
        s if s.len() > 1 && (s.starts_with('e') || s.starts_with('E')) => {
            // Go parses an int64 and keeps its low 32 bits.
            let exp: i64 = s[1..].parse().ok()?;
            Some((10, exp as i32, Format::DecimalExponent))
        }
        _ => None,
    }
}

fn parse(s: &str) -> Option<Quantity> {
    if s.is_empty() {
        return None;
    }
    if s == "0" {
        return Some(Quantity {
            m: 0,
            e: 0,
            format: Format::DecimalSI,
            kept: Some(s.into()),
        });
    }
    let sp = split(s)?;
    let (base, exponent, format) = interpret(sp.suffix)?;
    let digits = (sp.num.len() + sp.denom.len()) as i32;
    let (mut scale, mantissa, precision) = match format {
        Format::DecimalExponent | Format::DecimalSI => (exponent, 1i64, 18 - digits),
        Format::BinarySI if exponent >= 0 && sp.denom.is_empty() => (
            0,
            1i64 << exponent,
            15 - sp.num.len() as i32 - exponent * 3 / 10 - 1,
        ),
        Format::BinarySI => (0, 1, -1),
    };
    if precision >= 0 {
        scale -= sp.denom.len() as i32;
        if scale >= NANO {
            let shifted = format!("{}{}", sp.num, sp.denom);
            let value: i64 = shifted.parse().ok()?;
            if let Some(mut result) = value.checked_mul(mantissa) {
                if !sp.positive {
                    result = -result;
                }
                let canonical_already = match format {
                    Format::BinarySI => exponent % 10 == 0 && value & 0x07 != 0,
                    _ => scale % 3 == 0 && !shifted.ends_with("000") && !shifted.starts_with('0'),
                };
                return Some(Quantity {
                    m: i128::from(result),
                    e: scale,
                    format,
                    kept: canonical_already.then(|| s.to_string()),
                });
            }
        }
    }
    // The arbitrary-precision path.
    let (mut m, mut e) = parse_decimal(sp.value)?;
    if base == 10 {
        e = e.checked_add(exponent)?;
    } else {
        m = m.checked_mul(1i128.checked_shl(exponent as u32)?)?;
    }
    let negative = m < 0;
    m = m.abs();
    if m != 0 && e < NANO {
        // Round up to a nano (Go rescales to exactly a nano; coarser values are the same number).
        m = div_pow10_away(m, (NANO - e) as u32).0;
        e = NANO;
    }
    let mut q = Quantity {
        m,
        e,
        format,
        kept: None,
    };
    if format == Format::BinarySI && m != 0 {
        if q.cmp_int(i128::from(i64::MAX)) == Ordering::Greater {
            (q.m, q.e) = (i128::from(i64::MAX), 0);
        }
        if q.cmp_int(1) == Ordering::Less {
            q.format = Format::DecimalSI;
        }
    }
    if negative {
        q.m = -q.m;
    }
    Some(q)
}

/// `[+-]digits[.digits]` as `m × 10^e`.
fn parse_decimal(s: &str) -> Option<(i128, i32)> {
    let (negative, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let mut m: i128 = 0;
    for c in int.bytes().chain(frac.bytes()) {
        if !c.is_ascii_digit() {
            return None;
        }
        m = m.checked_mul(10)?.checked_add(i128::from(c - b'0'))?;
    }
    Some((if negative { -m } else { m }, -(frac.len() as i32)))
}

impl Quantity {
    /// Go's `RoundUp(scale)`: a value finer than `scale` is rounded away from zero (and no longer
    /// kept as written).
    fn round_up(mut self, scale: i32) -> Option<Quantity> {
        if self.e < scale {
            self.m = div_pow10_away(self.m, (scale - self.e) as u32).0;
            self.e = scale;
            self.kept = None;
        }
        Some(self)
    }

    /// `m × 10^e` compared with an integer.
    fn cmp_int(&self, n: i128) -> Ordering {
        if self.e >= 0 {
            match pow10(self.e as u32).and_then(|p| self.m.checked_mul(p)) {
                Some(v) => v.cmp(&n),
                // Beyond i128, so beyond any n.
                None => {
                    if self.m > 0 {
                        Ordering::Greater
                    } else {
                        Ordering::Less
                    }
                }
            }
        } else {
            match pow10((-self.e) as u32).and_then(|p| n.checked_mul(p)) {
                Some(scaled) => self.m.cmp(&scaled),
                // n × 10^-e is beyond i128, so beyond any m.
                None => {
                    if n > 0 {
                        Ordering::Less
                    } else {
                        Ordering::Greater
                    }
                }
            }
        }
    }

    fn to_go_string(&self) -> Option<String> {
        if let Some(k) = &self.kept {
            return Some(k.clone());
        }
        if self.m == 0 {
            return Some("0".into());
        }
        let mut format = self.format;
        let mut whole = None;
        if format == Format::BinarySI {
            let small =
                self.cmp_int(-1024) == Ordering::Greater && self.cmp_int(1024) == Ordering::Less;
            if small {
                format = Format::DecimalSI;
            } else if self.e >= 0 {
                whole = Some(self.m.checked_mul(pow10(self.e as u32)?)?);
            } else {
                let (q, exact) = div_pow10_away(self.m, (-self.e) as u32);
                if exact {
                    whole = Some(q);
                } else {
                    format = Format::DecimalSI;
                }
            }
        }
        if let (Format::BinarySI, Some(mut n)) = (format, whole) {
            let mut exp = 0;
            while n.abs() >= 1024 && n % 1024 == 0 {
                n /= 1024;
                exp += 10;
            }
            let suffix = match exp {
                10 => "Ki",
                20 => "Mi",
                30 => "Gi",
                40 => "Ti",
                50 => "Pi",
                60 => "Ei",
                _ => "",
            };
            return Some(format!("{n}{suffix}"));
        }
        let (mut m, mut e) = (self.m, self.e);
        while m.abs() >= 10 && m % 10 == 0 {
            m /= 10;
            e += 1;
        }
        let down = e.rem_euclid(3);
        m = m.checked_mul(pow10(down as u32)?)?;
        e -= down;
        let suffix = match format {
            Format::DecimalExponent if e == 0 => String::new(),
            Format::DecimalExponent => format!("e{e}"),
            _ => match e {
                -9 => "n",
                -6 => "u",
                -3 => "m",
                3 => "k",
                6 => "M",
                9 => "G",
                12 => "T",
                15 => "P",
                18 => "E",
                // Go finds no suffix there either and writes none.
                _ => "",
            }
            .to_string(),
        };
        Some(format!("{m}{suffix}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_forms() {
        for (input, want) in [
            ("0.1", "100m"),
            ("100m", "100m"),
            ("1", "1"),
            ("1.5", "1500m"),
            ("1000", "1k"),
            ("1000m", "1"),
            ("64Mi", "64Mi"),
            ("1024Mi", "1Gi"),
            ("1.5Gi", "1536Mi"),
            ("0.5Gi", "512Mi"),
            ("0.5Ki", "512"),
            ("128974848", "128974848"),
            ("129e6", "129e6"),
            ("123Mi", "123Mi"),
            ("+1", "+1"),
            ("01", "01"),
            ("-1.5", "-1500m"),
            ("1e3", "1e3"),
            ("1E3", "1E3"),
            ("1000e3", "1e6"),
            ("0", "0"),
            ("0.0", "0"),
            ("0.000000001", "1n"),
            ("0.0000000001", "1n"),
        ] {
            assert_eq!(canonical(input).as_deref(), Some(want), "{input}");
        }
        for bad in ["", "abc", "1.2.3", "1Zi", "1e", "--1", "1m3"] {
            assert_eq!(canonical(bad), None, "{bad}");
        }
    }

    #[test]
    fn resources_round_up_to_a_milli() {
        assert_eq!(canonical_resource("0.0001").as_deref(), Some("1m"));
        assert_eq!(canonical_resource("0.1").as_deref(), Some("100m"));
        assert_eq!(canonical_resource("1.0001").as_deref(), Some("1001m"));
        assert_eq!(canonical_resource("-0.0001").as_deref(), Some("-1m"));
        assert_eq!(canonical_resource("100u").as_deref(), Some("1m"));
        // Kept as written when no rounding happens.
        assert_eq!(canonical_resource("+1").as_deref(), Some("+1"));
    }

    /// Every line of the golden table: input, Go's `json.Marshal(ParseQuantity(input))`, and
    /// the same after `RoundUp(resource.Milli)` (or `ERROR` when Go refuses the input).
    #[test]
    fn matches_the_go_implementation() {
        let table = include_str!("../../tests/fixtures/quantity/golden.tsv");
        let mut n = 0;
        for line in table
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
        {
            let cols: Vec<&str> = line.split('\t').collect();
            let (input, plain, milli) = (cols[0], cols[1], cols[2]);
            let want = |c: &str| (c != "ERROR").then(|| c.to_string());
            assert_eq!(canonical(input), want(plain), "canonical({input:?})");
            assert_eq!(
                canonical_resource(input),
                want(milli),
                "canonical_resource({input:?})"
            );
            n += 1;
        }
        assert!(n > 100, "golden table too short: {n}");
    }
}
