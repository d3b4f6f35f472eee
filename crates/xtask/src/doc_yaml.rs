//! PyYAML's emitter, the part `yaml.dump(v, Dumper=SafeDumper, sort_keys=False,
//! default_flow_style=False, width=100000)` uses with strings that contain a newline asked for
//! in literal style (`|`): block mappings and (indentless) block sequences, `{}` and `[]` for
//! empty ones, and PyYAML's choice of plain, single-quoted, double-quoted or literal scalars
//! (`analyze_scalar`, `choose_scalar_style`; YAML 1.1 resolution decides when a string must be
//! quoted so it does not read back as a number, a bool or null). The state (column, whether
//! the last thing written was whitespace or indentation) is PyYAML's, so the output is byte
//! for byte what PyYAML writes.

use std::sync::LazyLock;

use regex::Regex;

use super::{Map, Value, python_float_repr};
use crate::Error;

const BEST_INDENT: usize = 2;
/// PyYAML folds lines past its width; the files here were written with width=100000.
const MAX_LINE: usize = 100_000;

/// `value` as PyYAML writes it (one implicit document).
pub fn to_pyyaml(value: &Value) -> Result<String, Error> {
    let mut e = Emitter {
        out: String::new(),
        column: 0,
        whitespace: true,
        indention: true,
        open_ended: false,
        indent: None,
    };
    e.node(value, Ctx::Root)?;
    // expect_document_end, then the stream end.
    e.write_indent();
    if e.open_ended {
        e.write_indicator("...", true, false, false);
        e.write_indent();
    }
    Ok(e.out)
}

#[derive(Clone, Copy, PartialEq)]
enum Ctx {
    Root,
    Sequence,
    MappingKey,
    MappingValue,
}

struct Emitter {
    out: String,
    column: usize,
    whitespace: bool,
    indention: bool,
    open_ended: bool,
    indent: Option<usize>,
}

#[derive(Clone, Copy, PartialEq)]
enum Style {
    Plain,
    Single,
    Double,
    Literal,
}

impl Emitter {
    fn write_indicator(&mut self, ind: &str, need_ws: bool, whitespace: bool, indention: bool) {
        if !self.whitespace && need_ws {
            self.out.push(' ');
            self.column += 1;
        }
        self.out.push_str(ind);
        self.column += ind.chars().count();
        self.whitespace = whitespace;
        self.indention = self.indention && indention;
        self.open_ended = false;
    }

    fn write_line_break(&mut self) {
        self.out.push('\n');
        self.whitespace = true;
        self.indention = true;
        self.column = 0;
    }

    fn write_indent(&mut self) {
        let indent = self.indent.unwrap_or(0);
        if !self.indention || self.column > indent || (self.column == indent && !self.whitespace) {
            self.write_line_break();
        }
        if self.column < indent {
            self.whitespace = true;
            self.out.push_str(&" ".repeat(indent - self.column));
            self.column = indent;
        }
    }

    fn increase_indent(&mut self, flow: bool, indentless: bool) -> Option<usize> {
        let saved = self.indent;
        self.indent = match self.indent {
            None if flow => Some(BEST_INDENT),
            None => Some(0),
            Some(i) if !indentless => Some(i + BEST_INDENT),
            Some(i) => Some(i),
        };
        saved
    }

    fn node(&mut self, v: &Value, ctx: Ctx) -> Result<(), Error> {
        match v {
            Value::Seq(items) if items.is_empty() => self.write_indicator("[]", true, false, false),
            Value::Map(m) if m.is_empty() => self.write_indicator("{}", true, false, false),
            Value::Seq(items) => {
                let indentless = ctx == Ctx::MappingValue && !self.indention;
                let saved = self.increase_indent(false, indentless);
                for item in items {
                    self.write_indent();
                    self.write_indicator("-", true, false, true);
                    self.node(item, Ctx::Sequence)?;
                }
                self.indent = saved;
            }
            Value::Map(m) => self.mapping(m)?,
            Value::Str(s) => self.scalar(s, true, s.contains('\n'), ctx)?,
            Value::Null => self.scalar("null", false, false, ctx)?,
            Value::Bool(b) => self.scalar(if *b { "true" } else { "false" }, false, false, ctx)?,
            Value::Int(i) => self.scalar(&i.to_string(), false, false, ctx)?,
            Value::Float(f) => self.scalar(&yaml_float(*f), false, false, ctx)?,
        }
        Ok(())
    }

    fn mapping(&mut self, m: &Map) -> Result<(), Error> {
        let saved = self.increase_indent(false, false);
        for (k, v) in m.iter() {
            self.write_indent();
            // check_simple_key: the key and its tag (`!!str`, 5) shorter than 128, one line.
            if k.is_empty()
                || k.contains(['\n', '\u{85}', '\u{2028}', '\u{2029}'])
                || k.chars().count() + 5 >= 128
            {
                return Err(Error::new(format!(
                    "YAML output: key {k:?} is not a simple key (empty, multi-line or too long)"
                )));
            }
            self.node(&Value::Str(k.to_string()), Ctx::MappingKey)?;
            self.write_indicator(":", false, false, false);
            self.node(v, Ctx::MappingValue)?;
        }
        self.indent = saved;
        Ok(())
    }

    /// `is_str`: a string (quoted when it would read back as something else); `literal`: the
    /// representer asked for `|` (the string has a newline).
    fn scalar(&mut self, text: &str, is_str: bool, literal: bool, ctx: Ctx) -> Result<(), Error> {
        if text.chars().count() >= MAX_LINE {
            return Err(Error::new(format!(
                "YAML output: a string of {MAX_LINE} characters or more would be folded"
            )));
        }
        let saved = self.increase_indent(true, false);
        let a = analyze(text);
        let simple_key = ctx == Ctx::MappingKey;
        // implicit[0]: read back plain, the text resolves to the scalar's own tag.
        let implicit_plain = !is_str || resolves_to_str(text);
        let style = if !literal
            && implicit_plain
            && !(simple_key && (a.empty || a.multiline))
            && a.allow_block_plain
        {
            Style::Plain
        } else if literal && !simple_key && a.allow_block {
            Style::Literal
        } else if !literal && a.allow_single_quoted && !(simple_key && a.multiline) {
            Style::Single
        } else {
            Style::Double
        };
        match style {
            Style::Plain => {
                if ctx == Ctx::Root {
                    self.open_ended = true;
                }
                if !text.is_empty() {
                    if !self.whitespace {
                        self.out.push(' ');
                        self.column += 1;
                    }
                    self.out.push_str(text);
                    self.column += text.chars().count();
                    self.whitespace = false;
                    self.indention = false;
                }
            }
            Style::Single => {
                self.write_indicator("'", true, false, false);
                let quoted = text.replace('\'', "''");
                self.column += quoted.chars().count();
                self.out.push_str(&quoted);
                self.write_indicator("'", false, false, false);
            }
            Style::Double => {
                self.write_indicator("\"", true, false, false);
                let escaped = double_escape(text);
                self.column += escaped.chars().count();
                self.out.push_str(&escaped);
                self.write_indicator("\"", false, false, false);
            }
            Style::Literal => self.literal(text),
        }
        self.indent = saved;
        Ok(())
    }

    fn literal(&mut self, text: &str) {
        let is_break = |c: char| matches!(c, '\n' | '\u{85}' | '\u{2028}' | '\u{2029}');
        let chars: Vec<char> = text.chars().collect();
        let mut hints = String::new();
        if let Some(&first) = chars.first() {
            if first == ' ' || is_break(first) {
                hints.push_str(&BEST_INDENT.to_string());
            }
            let last = chars[chars.len() - 1];
            if !is_break(last) {
                hints.push('-');
            } else if chars.len() == 1 || is_break(chars[chars.len() - 2]) {
                hints.push('+');
            }
        }
        self.write_indicator(&format!("|{hints}"), true, false, false);
        if hints.ends_with('+') {
            self.open_ended = true;
        }
        self.write_line_break();
        let mut breaks = true;
        let (mut start, mut end) = (0, 0);
        while end <= chars.len() {
            let ch = chars.get(end).copied();
            if breaks {
                if ch.is_none_or(|c| !is_break(c)) {
                    for &br in &chars[start..end] {
                        if br == '\n' {
                            self.write_line_break();
                        } else {
                            self.out.push(br);
                            self.whitespace = true;
                            self.indention = true;
                            self.column = 0;
                        }
                    }
                    if ch.is_some() {
                        self.write_indent();
                    }
                    start = end;
                }
            } else if ch.is_none_or(is_break) {
                let data: String = chars[start..end].iter().collect();
                self.column += data.chars().count();
                self.out.push_str(&data);
                if ch.is_none() {
                    self.write_line_break();
                }
                start = end;
            }
            if let Some(c) = ch {
                breaks = is_break(c);
            }
            end += 1;
        }
    }
}

/// PyYAML's `represent_float`.
fn yaml_float(f: f64) -> String {
    if f.is_nan() {
        ".nan".into()
    } else if f.is_infinite() {
        if f > 0.0 {
            ".inf".into()
        } else {
            "-.inf".into()
        }
    } else {
        let v = python_float_repr(f).to_lowercase();
        if !v.contains('.') && v.contains('e') {
            v.replacen('e', ".0e", 1)
        } else {
            v
        }
    }
}

fn double_escape(text: &str) -> String {
    let mut out = String::new();
    for ch in text.chars() {
        let escape = matches!(
            ch,
            '"' | '\\' | '\u{85}' | '\u{2028}' | '\u{2029}' | '\u{feff}'
        ) || !(' '..='~').contains(&ch);
        if !escape {
            out.push(ch);
            continue;
        }
        let repl = match ch {
            '\0' => Some('0'),
            '\u{7}' => Some('a'),
            '\u{8}' => Some('b'),
            '\t' => Some('t'),
            '\n' => Some('n'),
            '\u{b}' => Some('v'),
            '\u{c}' => Some('f'),
            '\r' => Some('r'),
            '\u{1b}' => Some('e'),
            '"' => Some('"'),
            '\\' => Some('\\'),
            '\u{85}' => Some('N'),
            '\u{a0}' => Some('_'),
            '\u{2028}' => Some('L'),
            '\u{2029}' => Some('P'),
            _ => None,
        };
        let c = ch as u32;
        match repl {
            Some(r) => {
                out.push('\\');
                out.push(r);
            }
            None if c <= 0xff => out.push_str(&format!("\\x{c:02X}")),
            None if c <= 0xffff => out.push_str(&format!("\\u{c:04X}")),
            None => out.push_str(&format!("\\U{c:08X}")),
        }
    }
    out
}

struct Analysis {
    empty: bool,
    multiline: bool,
    allow_block_plain: bool,
    allow_single_quoted: bool,
    allow_block: bool,
}

/// PyYAML's `Emitter.analyze_scalar` with allow_unicode=False (flow-plain is never used here).
fn analyze(scalar: &str) -> Analysis {
    if scalar.is_empty() {
        return Analysis {
            empty: true,
            multiline: false,
            allow_block_plain: true,
            allow_single_quoted: true,
            allow_block: false,
        };
    }
    let chars: Vec<char> = scalar.chars().collect();
    let ws = |c: char| {
        matches!(
            c,
            '\0' | ' ' | '\t' | '\r' | '\n' | '\u{85}' | '\u{2028}' | '\u{2029}'
        )
    };
    let is_break = |c: char| matches!(c, '\n' | '\u{85}' | '\u{2028}' | '\u{2029}');
    let mut block_indicators = scalar.starts_with("---") || scalar.starts_with("...");
    let (mut line_breaks, mut special) = (false, false);
    let (mut leading_space, mut leading_break, mut trailing_space, mut trailing_break) =
        (false, false, false, false);
    let (mut break_space, mut space_break) = (false, false);
    let mut preceded_by_ws = true;
    let mut followed_by_ws = chars.len() == 1 || ws(chars[1]);
    let (mut previous_space, mut previous_break) = (false, false);
    let n = chars.len();
    for (index, &ch) in chars.iter().enumerate() {
        if index == 0 {
            if "#,[]{}&*!|>'\"%@`".contains(ch) {
                block_indicators = true;
            }
            if (ch == '?' || ch == ':') && followed_by_ws {
                block_indicators = true;
            }
            if ch == '-' && followed_by_ws {
                block_indicators = true;
            }
        } else {
            if ch == ':' && followed_by_ws {
                block_indicators = true;
            }
            if ch == '#' && preceded_by_ws {
                block_indicators = true;
            }
        }
        if is_break(ch) {
            line_breaks = true;
        }
        if !(ch == '\n' || (' '..='~').contains(&ch)) {
            // Unicode characters are special too: allow_unicode is off.
            special = true;
        }
        if ch == ' ' {
            leading_space |= index == 0;
            trailing_space |= index == n - 1;
            break_space |= previous_break;
            previous_space = true;
            previous_break = false;
        } else if is_break(ch) {
            leading_break |= index == 0;
            trailing_break |= index == n - 1;
            space_break |= previous_space;
            previous_space = false;
            previous_break = true;
        } else {
            previous_space = false;
            previous_break = false;
        }
        preceded_by_ws = ws(ch);
        followed_by_ws = index + 2 >= n || ws(chars[index + 2]);
    }
    let mut allow_block_plain = true;
    let mut allow_single_quoted = true;
    let mut allow_block = true;
    if leading_space || leading_break || trailing_space || trailing_break {
        allow_block_plain = false;
    }
    if trailing_space {
        allow_block = false;
    }
    if break_space {
        allow_block_plain = false;
        allow_single_quoted = false;
    }
    if space_break || special {
        allow_block_plain = false;
        allow_single_quoted = false;
        allow_block = false;
    }
    if line_breaks || block_indicators {
        allow_block_plain = false;
    }
    Analysis {
        empty: false,
        multiline: line_breaks,
        allow_block_plain,
        allow_single_quoted,
        allow_block,
    }
}

/// Whether `text`, read back as a plain scalar by PyYAML's resolver (YAML 1.1: bools such as
/// `yes`/`off`, ints with `0x`/`0o`/`0b`/sexagesimal forms and `_`, floats, null, timestamps,
/// `<<`, `=`), is a string.
fn resolves_to_str(text: &str) -> bool {
    static IMPLICIT: LazyLock<Vec<(&'static str, Regex)>> = LazyLock::new(|| {
        [
            ("yYnNtTfFoO", r"^(?:yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)$"),
            (
                "-+0123456789.",
                r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?|[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
            ),
            (
                "-+0123456789",
                r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+|[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)$",
            ),
            ("<", r"^(?:<<)$"),
            ("~nN", r"^(?:~|null|Null|NULL)$"),
            (
                "0123456789",
                r"^(?:[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]|[0-9][0-9][0-9][0-9]-[0-9][0-9]?-[0-9][0-9]?(?:[Tt]|[ \t]+)[0-9][0-9]?:[0-9][0-9]:[0-9][0-9](?:\.[0-9]*)?(?:[ \t]*(?:Z|[-+][0-9][0-9]?(?::[0-9][0-9])?))?)$",
            ),
            ("=", r"^(?:=)$"),
        ]
        .into_iter()
        .map(|(first, re)| (first, Regex::new(re).expect("the resolver's patterns compile")))
        .collect()
    });
    // The empty string resolves to null.
    let Some(first) = text.chars().next() else {
        return false;
    };
    !IMPLICIT
        .iter()
        .any(|(firsts, re)| firsts.contains(first) && re.is_match(text))
}
