//! Kubernetes resource quantities with the arithmetic and the printing of apimachinery's
//! `resource.Quantity`, which OpenKruise uses to evaluate `resourcesPolicy`.
//!
//! A computed resource goes into the pod as the string Kubernetes prints, so this keeps the
//! state a Kubernetes Quantity has, because the printed form and some roundings depend on it:
//!
//! * the amount, held either as an int64 scaled by a power of ten or as an arbitrary decimal
//!   (here an i128 with a scale, which bounds the magnitudes this operator computes to about
//!   10^29: past that an operation is an error, where Kubernetes would go on with a big
//!   integer);
//! * the format (`DecimalSI`, `BinarySI`, `DecimalExponent`, or unset for the zero value);
//! * the text it was parsed from, which Kubernetes keeps and prints back when the text was
//!   already in canonical form by its own test (so `+100m` or `0100m` print as written).
//!
//! Every rule here follows apimachinery v0.32 (the version OpenKruise 1.9 is built with); the
//! tests compare against values recorded from it (`tests/fixtures/resources-policy/`).

mod parse;

use std::cmp::Ordering;

/// How a quantity prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `12e6`
    DecimalExponent,
    /// `12Mi` (powers of 1024)
    BinarySI,
    /// `12M` (powers of 1000)
    DecimalSI,
    /// The zero value's empty format; prints like `DecimalExponent`.
    Unset,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Amount {
    /// `value × 10^scale`.
    Int { value: i64, scale: i32 },
    /// `unscaled × 10^-scale` (the scale counts digits after the decimal point).
    Dec { unscaled: i128, scale: i32 },
}

/// A resource quantity.
#[derive(Clone, Debug, PartialEq)]
pub struct Quantity {
    amount: Amount,
    format: Format,
    /// The text Kubernetes prints without recomputing it.
    text: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error(
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )]
    Format,
    #[error("unable to parse numeric part of quantity")]
    Numeric,
    #[error("unable to parse quantity's suffix")]
    Suffix,
    #[error("the value is too large for sidecarset-operator to compute (beyond about 10^29)")]
    OutOfRange,
}

const DECIMAL_SUFFIXES: &[(&str, i32)] = &[
    ("n", -9),
    ("u", -6),
    ("m", -3),
    ("", 0),
    ("k", 3),
    ("M", 6),
    ("G", 9),
    ("T", 12),
    ("P", 15),
    ("E", 18),
];
const BINARY_SUFFIXES: &[(&str, i32)] = &[
    ("Ki", 10),
    ("Mi", 20),
    ("Gi", 30),
    ("Ti", 40),
    ("Pi", 50),
    ("Ei", 60),
];

fn pow10(k: i64) -> Option<i128> {
    u32::try_from(k).ok().and_then(|k| 10i128.checked_pow(k))
}

/// `int64(f)` as Go compiles it on amd64: truncation, and the "integer indefinite" value
/// (i64::MIN) for NaN and for values out of range.
pub fn go_f64_to_i64(f: f64) -> i64 {
    const LIMIT: f64 = 9_223_372_036_854_775_808.0; // 2^63
    if f.is_nan() || !(-LIMIT..LIMIT).contains(&f) {
        i64::MIN
    } else {
        f as i64
    }
}

/// Go's `big.Int.Int64()`: the low 64 bits of the magnitude, with the sign.
fn big_int64(x: i128) -> i64 {
    let v = x.unsigned_abs() as u64 as i64;
    if x < 0 { v.wrapping_neg() } else { v }
}

/// `base × 10^scale` and whether it fit an i64, as apimachinery's positiveScaleInt64 computes
/// it: for the scales it special-cases, the wrapped product; otherwise 0 on overflow.
fn positive_scale(base: i64, scale: i32) -> (i64, bool) {
    // int64MultiplyScale
    let mul = |a: i64, b: i64| -> (i64, bool) {
        if a == 0 || a == 1 {
            return (a.wrapping_mul(b), true);
        }
        if a == i64::MIN && b != 1 {
            return (0, false);
        }
        let c = a.wrapping_mul(b);
        (c, c.wrapping_div(b) == a)
    };
    match scale {
        0 => (base, true),
        1 => mul(base, 10),
        2 => mul(base, 100),
        3 => mul(base, 1000),
        6 => mul(base, 1_000_000),
        9 => mul(base, 1_000_000_000),
        _ if base == 0 => (0, true),
        _ => {
            let mut v = base;
            for _ in 0..scale.max(0) {
                match mul(v, 10) {
                    (c, true) => v = c,
                    (_, false) => return (0, false),
                }
            }
            (v, true)
        }
    }
}

/// `base / 10^scale`, rounded away from zero (apimachinery's negativeScaleInt64).
fn negative_scale(base: i64, scale: i32) -> i64 {
    if scale == 0 {
        return base;
    }
    let mut value = base;
    let mut fraction = false;
    for _ in 0..scale {
        if !fraction && value % 10 != 0 {
            fraction = true;
        }
        value /= 10;
        if value == 0 {
            return match (fraction, base > 0) {
                (false, _) => 0,
                (true, true) => 1,
                (true, false) => -1,
            };
        }
    }
    match (fraction, base > 0) {
        (false, _) => value,
        (true, true) => value + 1,
        (true, false) => value - 1,
    }
}

/// Exact comparison of `a.0 × 10^a.1` with `b.0 × 10^b.1`.
fn cmp_exact(a: (i128, i64), b: (i128, i64)) -> Ordering {
    let (sa, sb) = (a.0.signum(), b.0.signum());
    if sa != sb || sa == 0 {
        return sa.cmp(&sb);
    }
    fn mag(a: (u128, i64), b: (u128, i64)) -> Ordering {
        if a.1 < b.1 {
            return mag(b, a).reverse();
        }
        match u32::try_from(a.1 - b.1)
            .ok()
            .and_then(|d| 10u128.checked_pow(d))
            .and_then(|p| a.0.checked_mul(p))
        {
            Some(scaled) => scaled.cmp(&b.0),
            None => Ordering::Greater,
        }
    }
    let m = mag((a.0.unsigned_abs(), a.1), (b.0.unsigned_abs(), b.1));
    if sa > 0 { m } else { m.reverse() }
}

impl Quantity {
    /// The zero value of a Go Quantity (no format).
    pub fn zero() -> Self {
        Quantity {
            amount: Amount::Int { value: 0, scale: 0 },
            format: Format::Unset,
            text: None,
        }
    }

    /// `resource.NewQuantity(value, format)`.
    pub fn new(value: i64, format: Format) -> Self {
        Quantity {
            amount: Amount::Int { value, scale: 0 },
            format,
            text: None,
        }
    }

    /// `resource.NewMilliQuantity(value, format)`: `value / 1000`.
    pub fn new_milli(value: i64, format: Format) -> Self {
        Quantity {
            amount: Amount::Int { value, scale: -3 },
            format,
            text: None,
        }
    }

    pub fn format(&self) -> Format {
        self.format
    }

    /// The value as `mantissa × 10^exponent`.
    fn parts(&self) -> (i128, i64) {
        match self.amount {
            Amount::Int { value, scale } => (value as i128, scale as i64),
            Amount::Dec { unscaled, scale } => (unscaled, -(scale as i64)),
        }
    }

    fn dec_parts(&self) -> (i128, i32) {
        match self.amount {
            Amount::Int { value, scale } => (value as i128, scale.wrapping_neg()),
            Amount::Dec { unscaled, scale } => (unscaled, scale),
        }
    }

    pub fn is_zero(&self) -> bool {
        self.parts().0 == 0
    }

    pub fn sign(&self) -> i32 {
        self.parts().0.signum() as i32
    }

    /// `q.Add(y)`: a zero `self` takes the format of `y`.
    pub fn add(&mut self, y: &Quantity) -> Result<(), QuantityError> {
        self.text = None;
        if let (
            Amount::Int {
                value: av,
                scale: asc,
            },
            Amount::Int {
                value: bv,
                scale: bsc,
            },
        ) = (self.amount, y.amount)
        {
            if av == 0 {
                self.format = y.format;
            }
            let sum = match () {
                _ if bv == 0 => Some((av, asc)),
                _ if av == 0 => Some((bv, bsc)),
                _ if asc == bsc => av.checked_add(bv).map(|v| (v, asc)),
                _ if asc > bsc => match positive_scale(av, asc - bsc) {
                    (a, true) => a.checked_add(bv).map(|v| (v, bsc)),
                    _ => None,
                },
                _ => match positive_scale(bv, bsc - asc) {
                    (b, true) => av.checked_add(b).map(|v| (v, asc)),
                    _ => None,
                },
            };
            if let Some((value, scale)) = sum {
                self.amount = Amount::Int { value, scale };
                return Ok(());
            }
        } else if self.is_zero() {
            self.format = y.format;
        }
        let (xu, xs) = self.dec_parts();
        let (yu, ys) = y.dec_parts();
        let s = xs.max(ys);
        let up = |u: i128, from: i32| {
            pow10(s as i64 - from as i64)
                .and_then(|p| u.checked_mul(p))
                .ok_or(QuantityError::OutOfRange)
        };
        let unscaled = up(xu, xs)?
            .checked_add(up(yu, ys)?)
            .ok_or(QuantityError::OutOfRange)?;
        self.amount = Amount::Dec { unscaled, scale: s };
        Ok(())
    }

    /// `q.Neg()`.
    pub fn neg(&mut self) {
        self.text = None;
        self.amount = match self.amount {
            Amount::Int { value, scale } => Amount::Int {
                value: value.wrapping_neg(),
                scale,
            },
            Amount::Dec { unscaled, scale } => Amount::Dec {
                unscaled: unscaled.wrapping_neg(),
                scale,
            },
        };
    }

    /// `q.Cmp(y)`. Exact; like Kubernetes, it turns `self` into the decimal form when either
    /// side is in it.
    pub fn cmp(&mut self, y: &Quantity) -> Ordering {
        if !matches!(
            (self.amount, y.amount),
            (Amount::Int { .. }, Amount::Int { .. })
        ) {
            let (unscaled, scale) = self.dec_parts();
            self.amount = Amount::Dec { unscaled, scale };
        }
        cmp_exact(self.parts(), y.parts())
    }

    fn cmp_i64(&self, v: i64) -> Ordering {
        cmp_exact(self.parts(), (v as i128, 0))
    }

    /// `q.MilliValue()`: `ceil(q × 1000)` as Kubernetes computes it, overflow and the rounding
    /// of negative values included.
    pub fn milli_value(&self) -> i64 {
        match self.amount {
            Amount::Int { value, scale } if scale < -3 => negative_scale(value, -3 - scale),
            Amount::Int { value, scale } => positive_scale(value, scale + 3).0,
            Amount::Dec { unscaled, scale } => {
                let dif = scale as i64 - 3;
                if dif == 0 {
                    big_int64(unscaled)
                } else if dif < 0 {
                    let factor = if -dif <= 18 {
                        10i64.pow((-dif) as u32)
                    } else {
                        i64::MIN
                    };
                    big_int64(unscaled).wrapping_mul(factor)
                } else if unscaled < i64::MAX as i128 && dif < 19 {
                    let divide = 10i64.pow(dif as u32);
                    let u = big_int64(unscaled);
                    let (q, r) = (u / divide, u % divide);
                    if r != 0 { q.wrapping_add(1) } else { q }
                } else {
                    let (q, r) = match pow10(dif) {
                        Some(p) => (unscaled.div_euclid(p), unscaled.rem_euclid(p)),
                        None if unscaled >= 0 => (0, unscaled),
                        None => (-1, 1),
                    };
                    if r != 0 {
                        big_int64(q).wrapping_add(1)
                    } else {
                        big_int64(q)
                    }
                }
            }
        }
    }

    /// `q.SetMilli(v)`: the value becomes `v / 1000`, the format stays.
    pub fn set_milli(&mut self, v: i64) {
        self.text = None;
        self.amount = Amount::Int {
            value: v,
            scale: -3,
        };
    }

    /// The value when it is a whole number (and fits).
    fn integer(&self) -> Option<i128> {
        let (m, e) = self.parts();
        if e >= 0 {
            pow10(e).and_then(|p| m.checked_mul(p))
        } else {
            let p = pow10(-e)?;
            (m % p == 0).then(|| m / p)
        }
    }

    /// The canonical form Kubernetes computes (`CanonicalizeBytes`).
    fn canonical(&self) -> String {
        if self.is_zero() {
            return "0".into();
        }
        let mut format = self.format;
        let mut integer = None;
        match format {
            Format::DecimalExponent | Format::DecimalSI => {}
            Format::BinarySI => {
                if self.cmp_i64(-1024) == Ordering::Greater && self.cmp_i64(1024) == Ordering::Less
                {
                    format = Format::DecimalSI;
                } else {
                    integer = self.integer();
                    if integer.is_none() {
                        format = Format::DecimalSI;
                    }
                }
            }
            Format::Unset => format = Format::DecimalExponent,
        }
        if let (Format::BinarySI, Some(v)) = (format, integer) {
            let (mut m, mut times) = (v.unsigned_abs(), 0);
            while m >= 1024 && m % 1024 == 0 {
                m /= 1024;
                times += 1;
            }
            let suffix = BINARY_SUFFIXES
                .iter()
                .find(|(_, e)| *e == times * 10)
                .map_or("", |(s, _)| s);
            let sign = if v < 0 { "-" } else { "" };
            return format!("{sign}{m}{suffix}");
        }
        let (mut m, mut e) = self.parts();
        while m % 10 == 0 {
            m /= 10;
            e += 1;
        }
        let zeros = e.rem_euclid(3);
        e -= zeros;
        let digits = format!("{m}{}", "0".repeat(zeros as usize));
        let suffix = match format {
            Format::DecimalSI => DECIMAL_SUFFIXES
                .iter()
                .find(|(_, x)| *x as i64 == e)
                .map_or(String::new(), |(s, _)| s.to_string()),
            _ if e == 0 => String::new(),
            _ => format!("e{e}"),
        };
        digits + &suffix
    }
}

/// Prints as `Quantity.String()` does: the kept text, or the canonical form.
impl std::fmt::Display for Quantity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.text {
            Some(t) => f.write_str(t),
            None => f.write_str(&self.canonical()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    struct Golden {
        op: String,
        a: String,
        b: Option<String>,
        n: Option<i64>,
        string: Option<String>,
        milli: Option<i64>,
        cmp: Option<i32>,
        error: Option<String>,
    }

    /// Inputs Kubernetes computes with big integers and this operator refuses.
    const BEYOND_RANGE: &[&str] = &["add 1e100 1"];

    fn run(c: &Golden) -> Result<(String, i64, Option<i32>), QuantityError> {
        let mut a = Quantity::parse(&c.a)?;
        let b = c.b.as_deref().map(Quantity::parse).transpose()?;
        let mut cmp = None;
        match (c.op.as_str(), b) {
            ("parse", _) => {}
            ("add", Some(b)) => a.add(&b)?,
            ("sub", Some(mut b)) => {
                b.neg();
                a.add(&b)?
            }
            ("cmp", Some(b)) => cmp = Some(a.cmp(&b) as i32),
            ("setmilli", _) => a.set_milli(c.n.unwrap()),
            ("neg", _) => a.neg(),
            (op, _) => panic!("unknown op {op}"),
        }
        Ok((a.to_string(), a.milli_value(), cmp))
    }

    #[test]
    fn parse_arithmetic_and_printing_match_apimachinery() {
        let cases: Vec<Golden> = serde_saphyr::from_str(include_str!(
            "../../../../tests/fixtures/resources-policy/quantity.yaml"
        ))
        .unwrap();
        assert!(cases.len() > 150);
        let mut failures = Vec::new();
        for c in &cases {
            let key = format!("{} {} {}", c.op, c.a, c.b.as_deref().unwrap_or(""));
            let got = run(c);
            let ok = match (&got, &c.error) {
                (Err(QuantityError::OutOfRange), None) => BEYOND_RANGE.contains(&key.trim()),
                (Err(e), Some(want)) => e.to_string() == *want || want.starts_with("b: "),
                (Err(_), None) | (Ok(_), Some(_)) => false,
                (Ok((s, m, cmp)), None) => {
                    c.string.as_ref().is_none_or(|w| w == s)
                        && c.milli.is_none_or(|w| w == *m)
                        && c.cmp.is_none_or(|w| Some(w) == *cmp)
                }
            };
            if !ok {
                failures.push(format!("{key}: got {got:?}, want {c:?}"));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn go_float_conversion_is_amd64s() {
        assert_eq!(go_f64_to_i64(1.9), 1);
        assert_eq!(go_f64_to_i64(-1.9), -1);
        assert_eq!(go_f64_to_i64(f64::INFINITY), i64::MIN);
        assert_eq!(go_f64_to_i64(f64::NAN), i64::MIN);
        assert_eq!(go_f64_to_i64(9.3e18), i64::MIN);
    }

    #[test]
    fn exact_comparison_across_scales() {
        assert_eq!(cmp_exact((1, 3), (1000, 0)), Ordering::Equal);
        assert_eq!(cmp_exact((1, 100), (i128::MAX, 0)), Ordering::Greater);
        assert_eq!(cmp_exact((-1, 100), (-1, 0)), Ordering::Less);
        assert_eq!(cmp_exact((0, 5), (0, -5)), Ordering::Equal);
    }
}
