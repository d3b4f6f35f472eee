//! Parsing a quantity as apimachinery's `ParseQuantity` does: sign, number and suffix, then an
//! int64 scaled by a power of ten when the digits fit, else an exact decimal.

use super::{
    Amount, BINARY_SUFFIXES, DECIMAL_SUFFIXES, Format, Quantity, QuantityError, cmp_exact, pow10,
};
use std::cmp::Ordering;

impl Quantity {
    /// Parses a quantity as `resource.ParseQuantity` does.
    pub fn parse(s: &str) -> Result<Self, QuantityError> {
        if s.is_empty() {
            return Err(QuantityError::Format);
        }
        if s == "0" {
            return Ok(Quantity {
                amount: Amount::Int { value: 0, scale: 0 },
                format: Format::DecimalSI,
                text: Some(s.to_string()),
            });
        }
        let parts = split(s.as_bytes())?;
        let (base, exponent, format) = interpret(parts.suffix).ok_or(QuantityError::Suffix)?;
        if let Some(q) = parse_int(s, &parts, exponent, format)? {
            return Ok(q);
        }
        parse_exact(&parts, base, exponent, format)
    }
}

/// The int64 path: the digits scaled by a power of ten (or times a power of two), when they fit
/// (`None` otherwise); the text is kept when it is in canonical form.
fn parse_int(
    s: &str,
    parts: &Split,
    exponent: i32,
    format: Format,
) -> Result<Option<Quantity>, QuantityError> {
    let (num, denom) = (parts.num, parts.denom);
    let mut scale: i32 = 0;
    let mut mantissa: i64 = 1;
    let precision: i32 = match format {
        Format::BinarySI => {
            if exponent >= 0 && denom.is_empty() {
                mantissa <<= exponent;
                let approx = (exponent as f32 * 3.0 / 10.0) as i32;
                15 - num.len() as i32 - approx - 1
            } else {
                -1
            }
        }
        _ => {
            scale = exponent;
            18 - (num.len() + denom.len()) as i32
        }
    };
    if precision >= 0 {
        scale = scale.wrapping_sub(denom.len() as i32);
        if scale >= -9 {
            let shifted = [num, denom].concat();
            // At most 18 digits here, so this fits.
            let value: i64 = std::str::from_utf8(&shifted)
                .ok()
                .and_then(|t| t.parse().ok())
                .ok_or(QuantityError::Numeric)?;
            if let Some(mut result) = value.checked_mul(mantissa) {
                if !parts.positive {
                    result = -result;
                }
                let canonical = match format {
                    Format::BinarySI => exponent % 10 == 0 && value & 0x07 != 0,
                    _ => scale % 3 == 0 && !shifted.ends_with(b"000") && shifted[0] != b'0',
                };
                return Ok(Some(Quantity {
                    amount: Amount::Int {
                        value: result,
                        scale,
                    },
                    format,
                    text: canonical.then(|| s.to_string()),
                }));
            }
        }
    }
    Ok(None)
}

/// The decimal path: exact, rounded up to nano, BinarySI capped at the int64 maximum.
fn parse_exact(
    parts: &Split,
    base: i32,
    exponent: i32,
    mut format: Format,
) -> Result<Quantity, QuantityError> {
    let (mut unscaled, mut dscale) = parse_decimal(parts.value)?;
    if base == 10 {
        dscale = dscale.wrapping_sub(exponent);
    } else {
        unscaled = unscaled
            .checked_mul(
                1i128
                    .checked_shl(exponent as u32)
                    .ok_or(QuantityError::OutOfRange)?,
            )
            .ok_or(QuantityError::OutOfRange)?;
    }
    let negative = unscaled < 0;
    unscaled = unscaled.abs();
    if unscaled != 0 {
        if dscale <= 9 {
            unscaled = pow10(9 - dscale as i64)
                .and_then(|p| unscaled.checked_mul(p))
                .ok_or(QuantityError::OutOfRange)?;
        } else {
            unscaled = match pow10(dscale as i64 - 9) {
                Some(p) => unscaled / p + i128::from(unscaled % p != 0),
                None => 1,
            };
        }
        dscale = 9;
    }
    if format == Format::BinarySI {
        if cmp_exact((unscaled, -(dscale as i64)), (i64::MAX as i128, 0)) == Ordering::Greater {
            unscaled = i64::MAX as i128;
            dscale = 0;
        }
        if cmp_exact((unscaled, -(dscale as i64)), (1, 0)) == Ordering::Less && unscaled > 0 {
            format = Format::DecimalSI;
        }
    }
    if negative {
        unscaled = -unscaled;
    }
    Ok(Quantity {
        amount: Amount::Dec {
            unscaled,
            scale: dscale,
        },
        format,
        text: None,
    })
}

/// A quantity's text in parts (apimachinery's parseQuantityString).
struct Split<'a> {
    positive: bool,
    /// Sign, digits and point, before the suffix.
    value: &'a [u8],
    num: &'a [u8],
    denom: &'a [u8],
    suffix: &'a [u8],
}

/// apimachinery's parseQuantityString.
fn split(s: &[u8]) -> Result<Split<'_>, QuantityError> {
    let end = s.len();
    let mut out = Split {
        positive: true,
        value: &[],
        num: &[],
        denom: &[],
        suffix: &[],
    };
    let mut pos = 0;
    match s.first() {
        Some(b'-') => {
            out.positive = false;
            pos += 1;
        }
        Some(b'+') => pos += 1,
        _ => {}
    }
    while pos < end && s[pos] == b'0' {
        pos += 1;
    }
    if pos >= end {
        out.num = b"0";
        out.value = b"0";
        return Ok(out);
    }
    let start = pos;
    while pos < end && s[pos].is_ascii_digit() {
        pos += 1;
    }
    out.num = if pos == start { b"0" } else { &s[start..pos] };
    if pos >= end {
        out.value = s;
        return Ok(out);
    }
    if s[pos] == b'.' {
        pos += 1;
        let start = pos;
        while pos < end && s[pos].is_ascii_digit() {
            pos += 1;
        }
        out.denom = &s[start..pos];
        if pos >= end {
            out.value = s;
            return Ok(out);
        }
    }
    out.value = &s[..pos];
    let suffix_start = pos;
    while pos < end && b"eEinumkKMGTP".contains(&s[pos]) {
        pos += 1;
    }
    if pos < end && (s[pos] == b'-' || s[pos] == b'+') {
        pos += 1;
    }
    while pos < end && s[pos].is_ascii_digit() {
        pos += 1;
    }
    if pos < end {
        return Err(QuantityError::Format);
    }
    out.suffix = &s[suffix_start..];
    Ok(out)
}

/// (base, exponent, format) of a suffix.
fn interpret(suffix: &[u8]) -> Option<(i32, i32, Format)> {
    let text = std::str::from_utf8(suffix).ok()?;
    if let Some((_, e)) = DECIMAL_SUFFIXES.iter().find(|(s, _)| *s == text) {
        return Some((10, *e, Format::DecimalSI));
    }
    if let Some((_, e)) = BINARY_SUFFIXES.iter().find(|(s, _)| *s == text) {
        return Some((2, *e, Format::BinarySI));
    }
    if text.len() > 1 && (text.starts_with('e') || text.starts_with('E')) {
        // Go parses an int64 and keeps its low 32 bits.
        let parsed: i64 = text[1..].parse().ok()?;
        return Some((10, parsed as i32, Format::DecimalExponent));
    }
    None
}

/// A decimal `[+-]digits[.digits]` as (unscaled, digits after the point).
fn parse_decimal(v: &[u8]) -> Result<(i128, i32), QuantityError> {
    let (negative, rest) = match v.first() {
        Some(b'-') => (true, &v[1..]),
        Some(b'+') => (false, &v[1..]),
        _ => (false, v),
    };
    let mut unscaled: i128 = 0;
    let mut digits = 0;
    let mut after_point: Option<i32> = None;
    for &c in rest {
        match c {
            b'.' if after_point.is_none() => after_point = Some(0),
            b'0'..=b'9' => {
                unscaled = unscaled
                    .checked_mul(10)
                    .and_then(|u| u.checked_add(i128::from(c - b'0')))
                    .ok_or(QuantityError::OutOfRange)?;
                digits += 1;
                if let Some(n) = after_point.as_mut() {
                    *n += 1;
                }
            }
            _ => return Err(QuantityError::Numeric),
        }
    }
    if digits == 0 {
        return Err(QuantityError::Numeric);
    }
    Ok((
        if negative { -unscaled } else { unscaled },
        after_point.unwrap_or(0),
    ))
}
