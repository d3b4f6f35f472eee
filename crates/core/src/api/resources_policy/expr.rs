//! The expression language of `resourcesPolicy.resourcesExpr`, evaluated as OpenKruise 1.9's
//! calculator (`pkg/util/calculator`) evaluates it.
//!
//! ```text
//! expr   := expr ('+' | '-') expr | term            left-associative
//! term   := term ('*' | '/') term | factor          left-associative, binds tighter
//! factor := NUMBER | QUANTITY | NAME | '(' expr ')' | NAME '(' expr [',' expr] ')' | '-' factor
//! ```
//!
//! * A NUMBER is `42`, `0.5`, `1e3` or a percentage `50%` (= 0.5), a float64. A QUANTITY is a
//!   number with one of the units m k M G T P Ki Mi Gi Ti Pi (`100m`, `1.5Gi`). A number
//!   followed by any other letters (`2Ei`, `5K`) is, as in OpenKruise, the number 0.
//! * NAME is a variable (`cpu`, `memory`, any case) or, before `(`, the function `max` or
//!   `min`, which take exactly two arguments.
//! * `+` and `-` on a quantity and a number turn the number into a quantity (`1` is `1000m`);
//!   `*` and `/` take a quantity and a number (never two quantities, never divide by a
//!   quantity) and work in whole millis; numbers with numbers are float64 arithmetic.
//! * There is no modulo: `%` only marks a percentage.
//! * A negative result is an error; so are division by zero, an unknown name and a bad
//!   quantity.
//!
//! Hand-written (a recursive-descent parser over a byte lexer) rather than taken from a parser
//! crate: the language is nine productions, and matching OpenKruise means reproducing its
//! lexer's quirks byte for byte (which bytes are letters or spaces, what a number token
//! swallows, a NUL byte ending the input), which a general grammar tool would get in the way
//! of.

use super::quantity::{Format, Quantity, QuantityError, go_f64_to_i64};
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;

/// A value: a float64 number or a quantity.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Number(f64),
    Quantity(Quantity),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Number(n) => write!(f, "{n}"),
            Value::Quantity(q) => write!(f, "{q}"),
        }
    }
}

/// Why an expression has no value.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ExprError {
    #[error("syntax error at byte {at}: {what}")]
    Syntax { at: usize, what: String },
    #[error("undefined variable {0:?}")]
    UndefinedVariable(String),
    #[error("unknown function {0:?} (use max or min)")]
    UnknownFunction(String),
    #[error("{name} takes exactly 2 arguments, got {got}")]
    Arguments { name: String, got: usize },
    #[error("multiplication of two quantities")]
    MultiplyQuantities,
    #[error("division by a quantity")]
    DivideByQuantity,
    #[error("division by zero")]
    DivideByZero,
    #[error("{text:?} is not a valid quantity: {error}")]
    BadQuantity { text: String, error: QuantityError },
    #[error("{0}")]
    Range(QuantityError),
    #[error("the result is negative: {0}")]
    Negative(String),
}

/// The variables an expression can use, by lower-case name.
pub type Variables = BTreeMap<String, Value>;

/// Evaluates `expr`. `vars` may be changed the way OpenKruise changes its variables while
/// evaluating (comparing two quantities converts the left one to Kubernetes' decimal form), so
/// pass a fresh set per expression.
pub fn evaluate(expr: &str, vars: &mut Variables) -> Result<Value, ExprError> {
    let mut p = Parser {
        lex: Lexer::new(expr.as_bytes()),
        tok: Token::Eof,
        at: 0,
        vars,
        last_error: None,
    };
    p.advance();
    let outcome = p.expr().and_then(|v| match p.tok {
        Token::Eof => Ok(v),
        _ => Err(p.syntax("expected an operator or the end")),
    });
    // As in OpenKruise, the last error met while evaluating wins over a syntax error.
    let result = match (outcome, p.last_error.take()) {
        (_, Some(e)) => return Err(e),
        (Err(syntax), None) => return Err(syntax),
        (Ok(Some(op)), None) => op.value,
        // A value is lost only with an error recorded; kept total all the same.
        (Ok(None), None) => return Err(p.syntax("no value")),
    };
    let negative = match &result {
        Value::Number(n) => *n < 0.0,
        Value::Quantity(q) => q.sign() < 0,
    };
    if negative {
        return Err(ExprError::Negative(result.to_string()));
    }
    Ok(result)
}

/// Whether `word` is in `expr` between non-word characters (Go regexp's `\bWORD\b`, which
/// OpenKruise uses to pick the variable of an expression).
pub fn is_word_in(expr: &str, word: &str) -> bool {
    // Go's `\bWORD\b`: ASCII word characters around it.
    let b = expr.as_bytes();
    let is_word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    expr.match_indices(word).any(|(i, _)| {
        let j = i + word.len();
        (i == 0 || !is_word(b[i - 1])) && (j == b.len() || !is_word(b[j]))
    })
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Number(Vec<u8>),
    Quantity(String),
    Name(Vec<u8>),
    Char(u8),
    Eof,
}

/// The lexer works on bytes, each taken as the Unicode code point of the same number (Latin-1),
/// which is what OpenKruise's lexer does with UTF-8 text.
struct Lexer<'a> {
    input: &'a [u8],
    pos: usize,
}

fn is_space(c: u8) -> bool {
    matches!(c, b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | b' ' | 0x85 | 0xa0)
}

fn is_letter(c: u8) -> bool {
    c.is_ascii_alphabetic()
        || matches!(c, 0xaa | 0xb5 | 0xba | 0xc0..=0xd6 | 0xd8..=0xf6 | 0xf8..=0xff)
}

const UNITS: &[&str] = &["m", "k", "M", "G", "T", "P", "Ki", "Mi", "Gi", "Ti", "Pi"];

impl<'a> Lexer<'a> {
    fn new(input: &'a [u8]) -> Self {
        Lexer { input, pos: 0 }
    }

    /// The byte at the cursor; 0 at the end (so a NUL byte ends the input too).
    fn peek(&self) -> u8 {
        self.input.get(self.pos).copied().unwrap_or(0)
    }

    /// (offset, token)
    fn next(&mut self) -> (usize, Token) {
        while self.peek() != 0 && is_space(self.peek()) {
            self.pos += 1;
        }
        let at = self.pos;
        let c = self.peek();
        if c == 0 {
            return (at, Token::Eof);
        }
        if c == b'.' || c.is_ascii_digit() {
            let text = self.number();
            return (at, classify(text));
        }
        if is_letter(c) {
            while is_letter(self.peek()) || self.peek().is_ascii_digit() || self.peek() == b'_' {
                self.pos += 1;
            }
            return (at, Token::Name(self.input[at..self.pos].to_vec()));
        }
        self.pos += 1;
        (at, Token::Char(c))
    }

    /// Digits, one point, an exponent with its sign, one `%`, then any letters as a unit.
    fn number(&mut self) -> &'a [u8] {
        let start = self.pos;
        let (mut dot, mut exp, mut percent, mut want_digit) = (false, false, false, false);
        loop {
            let c = self.peek();
            match c {
                0 => break,
                b'0'..=b'9' => want_digit = false,
                b'.' if dot || exp || percent => break,
                b'.' => dot = true,
                b'e' | b'E' if exp || percent => break,
                b'e' | b'E' => {
                    exp = true;
                    want_digit = true;
                }
                b'+' | b'-' if !want_digit => break,
                b'+' | b'-' => want_digit = false,
                b'%' if percent => break,
                b'%' => percent = true,
                _ if is_letter(c) && !want_digit => {
                    while is_letter(self.peek()) {
                        self.pos += 1;
                    }
                    break;
                }
                _ => break,
            }
            self.pos += 1;
        }
        &self.input[start..self.pos]
    }
}

/// A number token is a quantity when what follows its numeric characters is a known unit.
fn classify(text: &[u8]) -> Token {
    let numeric = |c: &u8| c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'E' | b'+' | b'-');
    match text.iter().position(|c| !numeric(c)) {
        Some(end) if end > 0 && UNITS.iter().any(|u| u.as_bytes() == &text[end..]) => {
            Token::Quantity(String::from_utf8_lossy(text).into_owned())
        }
        _ => Token::Number(text.to_vec()),
    }
}

/// OpenKruise's parseNumber with its error ignored: text that is not a float is 0, a
/// percentage is divided by 100 (and 0 when it overflows).
fn number_value(text: &[u8]) -> f64 {
    let Ok(text) = std::str::from_utf8(text) else {
        return 0.0;
    };
    match text.strip_suffix('%') {
        Some(n) => match n.parse::<f64>() {
            Ok(v) if v.is_finite() => v / 100.0,
            _ => 0.0,
        },
        None => text.parse::<f64>().unwrap_or(0.0),
    }
}

/// A value, and the variable it is (when it is one, unchanged): comparing it to a quantity
/// changes the variable, as in OpenKruise where both are the same object.
struct Operand {
    value: Value,
    var: Option<String>,
}

impl From<Value> for Operand {
    fn from(value: Value) -> Self {
        Operand { value, var: None }
    }
}

/// `Ok(None)` is OpenKruise's nil: a value lost to an error already recorded in `last_error`.
type Eval = Result<Option<Operand>, ExprError>;

struct Parser<'a, 'v> {
    lex: Lexer<'a>,
    tok: Token,
    at: usize,
    vars: &'v mut Variables,
    last_error: Option<ExprError>,
}

fn milli(n: f64) -> Quantity {
    Quantity::new_milli(go_f64_to_i64(n * 1000.0), Format::DecimalSI)
}

fn to_quantity(v: &Value) -> Quantity {
    match v {
        Value::Quantity(q) => q.clone(),
        Value::Number(n) => milli(*n),
    }
}

impl Parser<'_, '_> {
    fn advance(&mut self) {
        (self.at, self.tok) = self.lex.next();
    }

    fn syntax(&self, what: &str) -> ExprError {
        let found = match &self.tok {
            Token::Eof => "the end".to_string(),
            Token::Char(c) if c.is_ascii_graphic() => format!("{:?}", *c as char),
            Token::Char(c) => format!("byte 0x{c:02x}"),
            Token::Number(t) | Token::Name(t) => format!("{:?}", String::from_utf8_lossy(t)),
            Token::Quantity(t) => format!("{t:?}"),
        };
        ExprError::Syntax {
            at: self.at,
            what: format!("{what}, found {found}"),
        }
    }

    fn fail(&mut self, e: ExprError) -> Option<Operand> {
        self.last_error = Some(e);
        None
    }

    fn expect(&mut self, c: u8) -> Result<(), ExprError> {
        if self.tok == Token::Char(c) {
            self.advance();
            Ok(())
        } else {
            Err(self.syntax(&format!("expected {:?}", c as char)))
        }
    }

    fn expr(&mut self) -> Eval {
        let mut left = self.term()?;
        while let Token::Char(op @ (b'+' | b'-')) = self.tok {
            self.advance();
            let right = self.term()?;
            left = match (left, right) {
                (Some(l), Some(r)) => self.additive(op, &l.value, &r.value),
                _ => None,
            };
        }
        Ok(left)
    }

    fn term(&mut self) -> Eval {
        let mut left = self.factor()?;
        while let Token::Char(op @ (b'*' | b'/')) = self.tok {
            self.advance();
            let right = self.factor()?;
            left = match (left, right) {
                (Some(l), Some(r)) => self.multiplicative(op, &l.value, &r.value),
                _ => None,
            };
        }
        Ok(left)
    }

    fn factor(&mut self) -> Eval {
        match std::mem::replace(&mut self.tok, Token::Eof) {
            Token::Number(text) => {
                self.advance();
                Ok(Some(Value::Number(number_value(&text)).into()))
            }
            Token::Quantity(text) => {
                self.advance();
                Ok(match Quantity::parse(&text) {
                    Ok(q) => Some(Value::Quantity(q).into()),
                    Err(error) => self.fail(ExprError::BadQuantity { text, error }),
                })
            }
            Token::Name(name) => {
                self.advance();
                let name = String::from_utf8_lossy(&name).into_owned();
                if self.tok == Token::Char(b'(') {
                    return self.call(name);
                }
                let key = name.to_ascii_lowercase();
                Ok(match self.vars.get(&key) {
                    Some(v) => Some(Operand {
                        value: v.clone(),
                        var: Some(key),
                    }),
                    None => self.fail(ExprError::UndefinedVariable(key)),
                })
            }
            Token::Char(b'(') => {
                self.advance();
                let inner = self.expr()?;
                self.expect(b')')?;
                Ok(inner)
            }
            Token::Char(b'-') => {
                self.advance();
                Ok(self.factor()?.map(|op| {
                    let negated = match op.value {
                        Value::Number(n) => Value::Number(-n),
                        Value::Quantity(mut q) => {
                            q.neg();
                            Value::Quantity(q)
                        }
                    };
                    negated.into()
                }))
            }
            other => {
                self.tok = other;
                Err(self.syntax("expected a number, a quantity, a name, '(' or '-'"))
            }
        }
    }

    fn call(&mut self, name: String) -> Eval {
        self.expect(b'(')?;
        let mut args = vec![self.expr()?];
        if self.tok == Token::Char(b',') {
            self.advance();
            args.push(self.expr()?);
        }
        self.expect(b')')?;
        let lower = name.to_ascii_lowercase();
        if lower != "max" && lower != "min" {
            return Ok(self.fail(ExprError::UnknownFunction(name)));
        }
        if args.len() != 2 {
            return Ok(self.fail(ExprError::Arguments {
                name: lower,
                got: args.len(),
            }));
        }
        let (Some(left), Some(right)) = (args.remove(0), args.remove(0)) else {
            return Ok(None);
        };
        Ok(Some(self.extremum(lower == "max", left, right).into()))
    }

    /// max(a, b) / min(a, b) with OpenKruise's choices of which object is returned: on a tie the
    /// left one; a number compared with a quantity becomes a quantity.
    fn extremum(&mut self, max: bool, left: Operand, right: Operand) -> Value {
        let wins = |o: Ordering| if max { o.is_ge() } else { o.is_le() };
        match (left.value, right.value) {
            (Value::Quantity(mut l), Value::Quantity(r)) => {
                let o = l.cmp(&r);
                if let Some(var) = &left.var {
                    self.vars.insert(var.clone(), Value::Quantity(l.clone()));
                }
                Value::Quantity(if wins(o) { l } else { r })
            }
            (Value::Quantity(l), Value::Number(n)) => {
                let rq = milli(n);
                let o = l.clone().cmp(&rq);
                Value::Quantity(if wins(o) { l } else { rq })
            }
            (Value::Number(n), Value::Quantity(r)) => {
                let mut lq = milli(n);
                let o = lq.cmp(&r);
                Value::Quantity(if wins(o) { lq } else { r })
            }
            (Value::Number(a), Value::Number(b)) => {
                let take_left = if max { a >= b } else { a <= b };
                Value::Number(if take_left { a } else { b })
            }
        }
    }

    fn additive(&mut self, op: u8, l: &Value, r: &Value) -> Option<Operand> {
        match (l, r) {
            (Value::Number(a), Value::Number(b)) => {
                Some(Value::Number(if op == b'+' { a + b } else { a - b }).into())
            }
            _ => {
                let mut sum = to_quantity(l);
                let mut y = to_quantity(r);
                if op == b'-' {
                    y.neg();
                }
                match sum.add(&y) {
                    Ok(()) => Some(Value::Quantity(sum).into()),
                    Err(e) => self.fail(ExprError::Range(e)),
                }
            }
        }
    }

    fn multiplicative(&mut self, op: u8, l: &Value, r: &Value) -> Option<Operand> {
        let scaled = |q: &Quantity, f: f64| {
            let mut out = q.clone();
            out.set_milli(go_f64_to_i64(f));
            Some(Value::Quantity(out).into())
        };
        match (op, l, r) {
            (b'*', Value::Quantity(_), Value::Quantity(_)) => {
                self.fail(ExprError::MultiplyQuantities)
            }
            (b'*', Value::Quantity(q), Value::Number(n))
            | (b'*', Value::Number(n), Value::Quantity(q)) => scaled(q, q.milli_value() as f64 * n),
            (b'*', Value::Number(a), Value::Number(b)) => Some(Value::Number(a * b).into()),
            (_, _, Value::Quantity(_)) => self.fail(ExprError::DivideByQuantity),
            (_, _, Value::Number(n)) if *n == 0.0 => self.fail(ExprError::DivideByZero),
            (_, Value::Quantity(q), Value::Number(n)) => scaled(q, q.milli_value() as f64 / n),
            (_, Value::Number(a), Value::Number(b)) => Some(Value::Number(a / b).into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    #[serde(untagged)]
    enum Var {
        Quantity(String),
        Number(f64),
    }

    #[derive(serde::Deserialize, Debug)]
    struct Golden {
        expr: String,
        #[serde(default)]
        vars: BTreeMap<String, Var>,
        quantity: Option<String>,
        number: Option<String>,
        error: Option<String>,
    }

    #[test]
    fn expressions_evaluate_as_openkruise_evaluates_them() {
        let cases: Vec<Golden> = serde_saphyr::from_str(include_str!(
            "../../../tests/fixtures/resources-policy/calculator.yaml"
        ))
        .unwrap();
        assert!(cases.len() > 500);
        let mut failures = Vec::new();
        for c in &cases {
            let mut vars: Variables = c
                .vars
                .iter()
                .map(|(k, v)| {
                    let v = match v {
                        Var::Quantity(q) if q == "<zero>" => Value::Quantity(Quantity::zero()),
                        Var::Quantity(q) => Value::Quantity(Quantity::parse(q).unwrap()),
                        Var::Number(n) => Value::Number(*n),
                    };
                    (k.clone(), v)
                })
                .collect();
            let got = evaluate(&c.expr, &mut vars);
            let ok = match (&got, &c.quantity, &c.number, &c.error) {
                (Ok(Value::Quantity(q)), Some(want), None, None) => q.to_string() == *want,
                (Ok(Value::Number(n)), None, Some(want), None) => {
                    let want: f64 = want.parse().unwrap();
                    n.to_bits() == want.to_bits() || (n.is_nan() && want.is_nan())
                }
                (Err(_), None, None, Some(_)) => true,
                _ => false,
            };
            if !ok {
                failures.push(format!(
                    "{:?} with {:?}: got {got:?}, want {c:?}",
                    c.expr, c.vars
                ));
            }
        }
        assert!(
            failures.is_empty(),
            "{} failures:\n{}",
            failures.len(),
            failures.join("\n")
        );
    }

    fn eval(expr: &str) -> Result<String, ExprError> {
        evaluate(expr, &mut Variables::new()).map(|v| v.to_string())
    }

    #[test]
    fn precedence_and_associativity() {
        assert_eq!(eval("2 + 3 * 4").unwrap(), "14");
        assert_eq!(eval("10 - 4 - 3").unwrap(), "3");
        assert_eq!(eval("64 / 4 / 2").unwrap(), "8");
        assert_eq!(eval("(2 + 3) * 4").unwrap(), "20");
        assert_eq!(eval("-2 * -3").unwrap(), "6");
        assert_eq!(eval("2 - -3").unwrap(), "5");
    }

    #[test]
    fn syntax_errors_name_the_place() {
        match eval("(2 + 3") {
            Err(ExprError::Syntax { at, .. }) => assert_eq!(at, 6),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            eval("2 % 3"),
            Err(ExprError::Syntax { at: 2, .. })
        ));
        assert!(matches!(eval(""), Err(ExprError::Syntax { at: 0, .. })));
        assert!(matches!(
            eval("max(1, 2, 3)"),
            Err(ExprError::Syntax { .. })
        ));
    }

    #[test]
    fn the_last_evaluation_error_wins_over_a_syntax_error() {
        assert_eq!(eval("1/0 +"), Err(ExprError::DivideByZero));
        assert_eq!(
            eval("foo + 1/0"),
            Err(ExprError::DivideByZero),
            "OpenKruise keeps the last error it met"
        );
    }

    #[test]
    fn words_are_found_as_go_regexp_finds_them() {
        assert!(is_word_in("max(memory*50%, 1Gi)", "memory"));
        assert!(is_word_in("memory", "memory"));
        assert!(!is_word_in("memory_x", "memory"));
        assert!(!is_word_in("MEMORY", "memory"));
        assert!(!is_word_in("xmemory", "memory"));
    }
}
