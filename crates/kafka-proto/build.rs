//! Generates the message codec from the schema files in `schema/`.
//!
//! Every `schema/*.schema` file describes one request or response body (the format is documented
//! in the crate README). This script parses them and writes two files into `$OUT_DIR`:
//!
//! - `messages.rs`: one module per message with its structs, `Default` impls holding the schema
//!   defaults, and version-aware `decode`/`encode` methods. Included by `src/messages.rs`.
//! - `arbitrary.rs`: per struct, a function that fills a value with deterministic pseudo-random
//!   content valid for a given version. Included only by the integration tests.
//!
//! Plain Rust, no dependencies: the schema format is simple enough to parse by hand.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::Path;

fn main() {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR");
    let out_dir = std::env::var("OUT_DIR").expect("OUT_DIR");
    let schema_dir = Path::new(&manifest_dir).join("schema");
    println!("cargo:rerun-if-changed=schema");
    println!("cargo:rerun-if-changed=build.rs");

    let mut paths: Vec<_> = fs::read_dir(&schema_dir)
        .expect("read schema dir")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "schema"))
        .collect();
    paths.sort();

    let mut messages = Vec::new();
    for p in &paths {
        println!("cargo:rerun-if-changed={}", p.display());
        let text = fs::read_to_string(p).expect("read schema file");
        let module = p
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("schema file name")
            .to_string();
        match parse_message(&text, module) {
            Ok(m) => messages.push(m),
            Err(e) => panic!("{}: {e}", p.display()),
        }
    }

    let mut code = String::new();
    let mut arb = String::new();
    gen_all(&messages, &mut code, &mut arb);
    fs::write(Path::new(&out_dir).join("messages.rs"), code).expect("write messages.rs");
    fs::write(Path::new(&out_dir).join("arbitrary.rs"), arb).expect("write arbitrary.rs");
}

// ---------------------------------------------------------------------------------------------
// Model
// ---------------------------------------------------------------------------------------------

/// An inclusive version range; `lo > hi` is the empty range.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Range {
    lo: i16,
    hi: i16,
}

impl Range {
    const NONE: Range = Range { lo: 1, hi: 0 };
    fn is_empty(self) -> bool {
        self.lo > self.hi
    }
    fn intersect(self, o: Range) -> Range {
        Range {
            lo: self.lo.max(o.lo),
            hi: self.hi.min(o.hi),
        }
    }
    fn contains(self, v: i16) -> bool {
        self.lo <= v && v <= self.hi
    }
    fn describe(self) -> String {
        if self.is_empty() {
            "none".into()
        } else if self.hi == i16::MAX {
            format!("{}+", self.lo)
        } else if self.lo == self.hi {
            format!("{}", self.lo)
        } else {
            format!("{}-{}", self.lo, self.hi)
        }
    }
}

fn parse_range(s: &str) -> Result<Range, String> {
    if s == "none" {
        return Ok(Range::NONE);
    }
    let s = s.strip_prefix('v').unwrap_or(s);
    let num = |t: &str| {
        t.parse::<i16>()
            .map_err(|_| format!("bad version range {s:?}"))
    };
    if let Some(lo) = s.strip_suffix('+') {
        Ok(Range {
            lo: num(lo)?,
            hi: i16::MAX,
        })
    } else if let Some((lo, hi)) = s.split_once('-') {
        Ok(Range {
            lo: num(lo)?,
            hi: num(hi)?,
        })
    } else {
        let v = num(s)?;
        Ok(Range { lo: v, hi: v })
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Prim {
    Bool,
    I8,
    I16,
    I32,
    I64,
    U16,
    U32,
    F64,
    Str,
    Bytes,
    Uuid,
    Records,
}

#[derive(Clone, Debug)]
enum Ty {
    Prim(Prim),
    Array(Box<Ty>),
    Struct(String),
}

fn parse_prim(s: &str) -> Option<Prim> {
    Some(match s {
        "bool" => Prim::Bool,
        "int8" => Prim::I8,
        "int16" => Prim::I16,
        "int32" => Prim::I32,
        "int64" => Prim::I64,
        "uint16" => Prim::U16,
        "uint32" => Prim::U32,
        "float64" => Prim::F64,
        "string" => Prim::Str,
        "bytes" => Prim::Bytes,
        "uuid" => Prim::Uuid,
        "records" => Prim::Records,
        _ => return None,
    })
}

fn parse_ty(s: &str) -> Result<Ty, String> {
    if let Some(elem) = s.strip_prefix("[]") {
        let e = parse_ty(elem)?;
        if matches!(e, Ty::Array(_) | Ty::Prim(Prim::Records)) {
            return Err(format!("unsupported array element type {elem}"));
        }
        return Ok(Ty::Array(Box::new(e)));
    }
    if let Some(p) = parse_prim(s) {
        return Ok(Ty::Prim(p));
    }
    if s.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && s.chars().all(|c| c.is_ascii_alphanumeric())
    {
        return Ok(Ty::Struct(s.to_string()));
    }
    Err(format!("unknown type {s:?}"))
}

#[derive(Clone, Debug)]
struct Field {
    name: String,
    ty: Ty,
    versions: Range,
    nullable: Range,
    tag: Option<u32>,
    default: Option<String>,
    /// Sub-fields, for struct and array-of-struct types.
    fields: Vec<Field>,
}

#[derive(Debug)]
struct StructDef {
    name: String,
    fields: Vec<Field>,
    /// Where it sits, for docs: "`FetchResponse.responses`".
    path: String,
}

#[derive(Debug)]
struct Message {
    module: String,
    kind: String,
    name: String,
    api_key: i16,
    valid: Range,
    flexible: Range,
    fields: Vec<Field>,
}

impl Message {
    fn api_name(&self) -> &str {
        self.name
            .strip_suffix("Request")
            .or_else(|| self.name.strip_suffix("Response"))
            .unwrap_or(&self.name)
    }
    fn ever_flexible(&self) -> bool {
        !self.flexible.intersect(self.valid).is_empty()
    }
}

// ---------------------------------------------------------------------------------------------
// Parser
// ---------------------------------------------------------------------------------------------

fn parse_message(text: &str, module: String) -> Result<Message, String> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
    let (_, head) = lines.next().ok_or("empty schema")?;
    let h: Vec<&str> = head.split_whitespace().collect();
    if h.len() != 8 || h[2] != "api" || h[4] != "versions" || h[6] != "flexible" {
        return Err(format!(
            "header must be `<request|response> Name api N versions A-B flexible R`: {head:?}"
        ));
    }
    if h[0] != "request" && h[0] != "response" {
        return Err(format!("unknown message kind {:?}", h[0]));
    }
    let api_key = h[3].parse().map_err(|_| "bad api key")?;
    let valid = parse_range(h[5])?;
    let flexible = parse_range(h[7])?;

    // (indent level, field) pairs, then folded into a tree.
    let mut flat = Vec::new();
    for (no, line) in lines {
        let indent = line.len() - line.trim_start().len();
        if indent % 2 != 0 || indent == 0 {
            return Err(format!(
                "line {}: indentation must be 2, 4, 6... spaces",
                no + 1
            ));
        }
        let f = parse_field(line.trim()).map_err(|e| format!("line {}: {e}", no + 1))?;
        flat.push((indent / 2, f));
    }
    let mut pos = 0;
    let fields = build_tree(&flat, &mut pos, 1)?;
    if pos != flat.len() {
        return Err("bad indentation".into());
    }
    Ok(Message {
        module,
        kind: h[0].to_string(),
        name: h[1].to_string(),
        api_key,
        valid,
        flexible,
        fields,
    })
}

fn build_tree(
    flat: &[(usize, Field)],
    pos: &mut usize,
    level: usize,
) -> Result<Vec<Field>, String> {
    let mut out: Vec<Field> = Vec::new();
    while let Some((lvl, f)) = flat.get(*pos) {
        if *lvl < level {
            break;
        }
        if *lvl > level {
            let parent = out.last_mut().ok_or("indented line without a parent")?;
            if !parent.fields.is_empty() {
                return Err(format!("bad indentation under {}", parent.name));
            }
            parent.fields = build_tree(flat, pos, level + 1)?;
            continue;
        }
        out.push(f.clone());
        *pos += 1;
    }
    Ok(out)
}

fn parse_field(line: &str) -> Result<Field, String> {
    let (name, rest) = line.split_once(':').ok_or("expected `name: type ...`")?;
    let name = name.trim().to_string();
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        return Err(format!("bad field name {name:?}"));
    }
    let mut toks = rest.split_whitespace();
    let ty = parse_ty(toks.next().ok_or("missing type")?)?;
    let versions = parse_range(toks.next().ok_or("missing versions")?)?;
    let mut f = Field {
        name,
        ty,
        versions,
        nullable: Range::NONE,
        tag: None,
        default: None,
        fields: Vec::new(),
    };
    let mut tagged = None;
    while let Some(k) = toks.next() {
        let mut val = || toks.next().ok_or(format!("{k} needs a value"));
        match k {
            "nullable" => f.nullable = parse_range(val()?)?,
            "tag" => f.tag = Some(val()?.parse().map_err(|_| "bad tag")?),
            "tagged" => tagged = Some(parse_range(val()?)?),
            "default" => f.default = Some(val()?.to_string()),
            other => return Err(format!("unknown attribute {other:?}")),
        }
    }
    match (f.tag, tagged) {
        (None, None) => {}
        (Some(_), Some(r)) if r == f.versions => {}
        (Some(_), Some(_)) => return Err("tagged versions must equal the field's versions".into()),
        _ => return Err("`tag` and `tagged` go together".into()),
    }
    if !f.nullable.is_empty() {
        match &f.ty {
            Ty::Prim(Prim::Str | Prim::Bytes | Prim::Records) | Ty::Array(_) | Ty::Struct(_) => {}
            _ => return Err(format!("field {} of this type cannot be nullable", f.name)),
        }
    }
    Ok(f)
}

// ---------------------------------------------------------------------------------------------
// Helpers for code generation
// ---------------------------------------------------------------------------------------------

const KEYWORDS: &[&str] = &[
    "as", "async", "await", "box", "break", "const", "continue", "crate", "dyn", "else", "enum",
    "extern", "false", "fn", "for", "gen", "if", "impl", "in", "let", "loop", "match", "mod",
    "move", "mut", "pub", "ref", "return", "self", "static", "struct", "super", "trait", "true",
    "try", "type", "unsafe", "use", "where", "while", "yield", "abstract", "become", "do", "final",
    "macro", "override", "priv", "typeof", "unsized", "virtual",
];

fn ident(name: &str) -> String {
    if KEYWORDS.contains(&name) {
        format!("r#{name}")
    } else {
        name.to_string()
    }
}

fn snake(name: &str) -> String {
    let mut out = String::new();
    let chars: Vec<char> = name.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_uppercase() {
            let prev_lower = i > 0 && !chars[i - 1].is_ascii_uppercase();
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_ascii_lowercase());
            let prev_upper = i > 0 && chars[i - 1].is_ascii_uppercase();
            if i > 0 && (prev_lower || (prev_upper && next_lower)) {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// A condition on `version`, simplified against the versions the code can be called with.
enum Cond {
    Always,
    Never,
    Expr(String),
}

impl Cond {
    fn of(r: Range, within: Range) -> Cond {
        let r = r.intersect(within);
        if r.is_empty() {
            Cond::Never
        } else if r.lo <= within.lo && r.hi >= within.hi {
            Cond::Always
        } else if r.lo <= within.lo {
            Cond::Expr(format!("version <= {}", r.hi))
        } else if r.hi >= within.hi {
            Cond::Expr(format!("version >= {}", r.lo))
        } else if r.lo == r.hi {
            Cond::Expr(format!("version == {}", r.lo))
        } else {
            Cond::Expr(format!("({}..={}).contains(&version)", r.lo, r.hi))
        }
    }
    fn expr(&self) -> String {
        match self {
            Cond::Always => "true".into(),
            Cond::Never => "false".into(),
            Cond::Expr(e) => e.clone(),
        }
    }
}

/// Writes `body` guarded by `cond` (nothing for Never, unguarded for Always).
fn guarded(out: &mut String, ind: &str, cond: &Cond, body: &str) {
    match cond {
        Cond::Never => {}
        Cond::Always => {
            for l in body.lines() {
                let _ = writeln!(out, "{ind}{l}");
            }
        }
        Cond::Expr(e) => {
            let _ = writeln!(out, "{ind}if {e} {{");
            for l in body.lines() {
                let _ = writeln!(out, "{ind}    {l}");
            }
            let _ = writeln!(out, "{ind}}}");
        }
    }
}

fn prim_rust(p: Prim) -> &'static str {
    match p {
        Prim::Bool => "bool",
        Prim::I8 => "i8",
        Prim::I16 => "i16",
        Prim::I32 => "i32",
        Prim::I64 => "i64",
        Prim::U16 => "u16",
        Prim::U32 => "u32",
        Prim::F64 => "f64",
        Prim::Str => "String",
        Prim::Bytes => "Bytes",
        Prim::Uuid => "Uuid",
        Prim::Records => "RecordChunks",
    }
}

fn is_option(f: &Field) -> bool {
    matches!(f.ty, Ty::Prim(Prim::Records)) || !f.nullable.is_empty()
}

fn elem_rust(t: &Ty) -> String {
    match t {
        Ty::Prim(p) => prim_rust(*p).to_string(),
        Ty::Struct(s) => s.clone(),
        Ty::Array(e) => format!("Vec<{}>", elem_rust(e)),
    }
}

fn field_rust(f: &Field) -> String {
    let base = elem_rust(&f.ty);
    if is_option(f) {
        format!("Option<{base}>")
    } else {
        base
    }
}

fn type_name(t: &Ty) -> String {
    match t {
        Ty::Prim(p) => match p {
            Prim::Bool => "bool",
            Prim::I8 => "int8",
            Prim::I16 => "int16",
            Prim::I32 => "int32",
            Prim::I64 => "int64",
            Prim::U16 => "uint16",
            Prim::U32 => "uint32",
            Prim::F64 => "float64",
            Prim::Str => "string",
            Prim::Bytes => "bytes",
            Prim::Uuid => "uuid",
            Prim::Records => "records",
        }
        .to_string(),
        Ty::Array(e) => format!("[]{}", type_name(e)),
        Ty::Struct(s) => s.clone(),
    }
}

fn parse_int(s: &str) -> Result<i128, String> {
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s),
    };
    let v = if let Some(h) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        i128::from_str_radix(h, 16)
    } else {
        body.parse::<i128>()
    }
    .map_err(|_| format!("bad integer default {s:?}"))?;
    Ok(if neg { -v } else { v })
}

/// The Rust expression for a field's default value.
fn default_expr(f: &Field) -> Result<String, String> {
    let d = f.default.as_deref();
    let opt = is_option(f);
    let wrap = |e: String| if opt { format!("Some({e})") } else { e };
    if d == Some("null") {
        if !opt {
            return Err(format!(
                "field {} defaults to null but is never nullable",
                f.name
            ));
        }
        return Ok("None".into());
    }
    Ok(match &f.ty {
        Ty::Prim(p) => match p {
            Prim::Bool => match d {
                None | Some("false") => "false".into(),
                Some("true") => "true".into(),
                Some(o) => return Err(format!("bad bool default {o:?}")),
            },
            Prim::I8 | Prim::I16 | Prim::I32 | Prim::I64 | Prim::U16 | Prim::U32 => {
                let v = d.map(parse_int).transpose()?.unwrap_or(0);
                let (lo, hi): (i128, i128) = match p {
                    Prim::I8 => (i8::MIN.into(), i8::MAX.into()),
                    Prim::I16 => (i16::MIN.into(), i16::MAX.into()),
                    Prim::I32 => (i32::MIN.into(), i32::MAX.into()),
                    Prim::I64 => (i64::MIN.into(), i64::MAX.into()),
                    Prim::U16 => (0, u16::MAX.into()),
                    _ => (0, u32::MAX.into()),
                };
                if v < lo || v > hi {
                    return Err(format!("default {v} out of range for {}", f.name));
                }
                if v == lo && v < 0 {
                    format!("{}::MIN", prim_rust(*p))
                } else {
                    format!("{v}")
                }
            }
            Prim::F64 => {
                let v: f64 = d
                    .map(|s| s.parse().map_err(|_| format!("bad float default {s:?}")))
                    .transpose()?
                    .unwrap_or(0.0);
                format!("{v:?}")
            }
            Prim::Str => match d {
                None => wrap("String::new()".into()),
                Some(s) => {
                    let inner = s
                        .strip_prefix('"')
                        .and_then(|s| s.strip_suffix('"'))
                        .ok_or(format!("string default must be quoted: {s:?}"))?;
                    if inner.is_empty() {
                        wrap("String::new()".into())
                    } else {
                        wrap(format!("String::from(\"{inner}\")"))
                    }
                }
            },
            Prim::Bytes => wrap("Bytes::new()".into()),
            Prim::Uuid => "Uuid::ZERO".into(),
            Prim::Records => "None".into(),
        },
        Ty::Array(_) => {
            if d.is_some() {
                return Err(format!("array {} can only default to null", f.name));
            }
            wrap("Vec::new()".into())
        }
        Ty::Struct(s) => {
            if d.is_some() {
                return Err(format!("struct {} cannot have a default", f.name));
            }
            wrap(format!("{s}::default()"))
        }
    })
}

/// Expression that is true when the field (accessed as `x`) differs from its default.
fn non_default_expr(f: &Field, x: &str) -> Result<String, String> {
    let d = default_expr(f)?;
    Ok(match (&f.ty, d.as_str()) {
        (_, "None") => format!("{x}.is_some()"),
        (Ty::Array(_), "Vec::new()") => format!("!{x}.is_empty()"),
        (Ty::Prim(Prim::Bytes), "Bytes::new()") => format!("!{x}.is_empty()"),
        (Ty::Prim(Prim::Str), "String::new()") => format!("!{x}.is_empty()"),
        (Ty::Prim(Prim::Bool), "false") => x.to_string(),
        (Ty::Prim(Prim::Bool), "true") => format!("!{x}"),
        (Ty::Prim(Prim::F64), _) => format!("{x}.to_bits() != ({d}f64).to_bits()"),
        _ => format!("{x} != {d}"),
    })
}

/// Code reading one value of element type `t` from decoder `d` (used for array elements and
/// non-nullable fields). Evaluates to a `Result`.
fn read_elem(t: &Ty, d: &str, compact: &str) -> String {
    match t {
        Ty::Prim(p) => match p {
            Prim::Bool => format!("{d}.bool()"),
            Prim::I8 => format!("{d}.i8()"),
            Prim::I16 => format!("{d}.i16()"),
            Prim::I32 => format!("{d}.i32()"),
            Prim::I64 => format!("{d}.i64()"),
            Prim::U16 => format!("{d}.u16()"),
            Prim::U32 => format!("{d}.u32()"),
            Prim::F64 => format!("{d}.f64()"),
            Prim::Str => format!("{d}.string({compact})"),
            Prim::Bytes => format!("{d}.bytes({compact})"),
            Prim::Uuid => format!("{d}.uuid()"),
            Prim::Records => format!("{d}.bytes({compact}).map(RecordChunks::from)"),
        },
        Ty::Struct(s) => format!("{s}::decode({d}, version)"),
        Ty::Array(_) => unreachable!("nested arrays are rejected by the parser"),
    }
}

/// Code reading field `f` from `d`, evaluating to the field's Rust type (uses `?`).
fn read_field(f: &Field, d: &str, compact: &str, within: Range) -> String {
    let nullable = Cond::of(f.nullable, within).expr();
    let opt = is_option(f);
    match &f.ty {
        Ty::Prim(Prim::Str) if opt => {
            format!("read_nullable_string({d}, {compact}, {nullable})?")
        }
        Ty::Prim(Prim::Bytes) if opt => format!("read_nullable_bytes({d}, {compact}, {nullable})?"),
        Ty::Prim(Prim::Records) => format!("read_records({d}, {compact}, {nullable})?"),
        Ty::Array(e) => {
            let elem = read_elem(e, "d", compact);
            if opt {
                format!("read_nullable_array({d}, {compact}, {nullable}, |d| {elem})?")
            } else {
                format!("read_array({d}, {compact}, |d| {elem})?")
            }
        }
        Ty::Struct(s) if opt => {
            format!("read_nullable_struct({d}, {nullable}, |d| {s}::decode(d, version))?")
        }
        t => format!("{}?", read_elem(t, d, compact)),
    }
}

/// Code writing element `x` (a reference for non-Copy types) to encoder `e`; evaluates to a
/// `Result<(), EncodeError>`.
fn write_elem(t: &Ty, x: &str, e: &str, compact: &str) -> String {
    match t {
        Ty::Prim(p) => match p {
            Prim::Bool => format!("{{ {e}.bool(*{x}); Ok(()) }}"),
            Prim::I8 => format!("{{ {e}.i8(*{x}); Ok(()) }}"),
            Prim::I16 => format!("{{ {e}.i16(*{x}); Ok(()) }}"),
            Prim::I32 => format!("{{ {e}.i32(*{x}); Ok(()) }}"),
            Prim::I64 => format!("{{ {e}.i64(*{x}); Ok(()) }}"),
            Prim::U16 => format!("{{ {e}.u16(*{x}); Ok(()) }}"),
            Prim::U32 => format!("{{ {e}.u32(*{x}); Ok(()) }}"),
            Prim::F64 => format!("{{ {e}.f64(*{x}); Ok(()) }}"),
            Prim::Str => format!("{e}.string({x}, {compact})"),
            Prim::Bytes => format!("{e}.bytes({x}, {compact})"),
            Prim::Uuid => format!("{{ {e}.uuid({x}); Ok(()) }}"),
            Prim::Records => unreachable!("records arrays are rejected by the parser"),
        },
        Ty::Struct(_) => format!("{x}.encode({e}, version)"),
        Ty::Array(_) => unreachable!("nested arrays are rejected by the parser"),
    }
}

/// Statement writing field `self.<f>` (given as `x`, a place expression) to `e`.
fn write_field(f: &Field, x: &str, e: &str, compact: &str, within: Range, what: &str) -> String {
    let nullable = Cond::of(f.nullable, within).expr();
    let opt = is_option(f);
    match &f.ty {
        Ty::Prim(Prim::Str) if opt => format!(
            "write_nullable_string({e}, {x}.as_deref(), {compact}, {nullable}, \"{what}\")?;"
        ),
        Ty::Prim(Prim::Bytes) if opt => {
            format!("write_nullable_bytes({e}, {x}.as_ref(), {compact}, {nullable}, \"{what}\")?;")
        }
        Ty::Prim(Prim::Records) => {
            format!("write_records({e}, {x}.as_ref(), {compact}, {nullable}, \"{what}\")?;")
        }
        Ty::Array(el) => {
            let w = write_elem(el, "it", "e", compact);
            if opt {
                format!(
                    "write_nullable_array({e}, {x}.as_deref(), {compact}, {nullable}, \"{what}\", |e, it| {w})?;"
                )
            } else {
                format!("write_array({e}, &{x}, {compact}, |e, it| {w})?;")
            }
        }
        Ty::Prim(p) => match p {
            Prim::Str => format!("{e}.string(&{x}, {compact})?;"),
            Prim::Bytes => format!("{e}.bytes(&{x}, {compact})?;"),
            Prim::Uuid => format!("{e}.uuid(&{x});"),
            Prim::Bool => format!("{e}.bool({x});"),
            Prim::I8 => format!("{e}.i8({x});"),
            Prim::I16 => format!("{e}.i16({x});"),
            Prim::I32 => format!("{e}.i32({x});"),
            Prim::I64 => format!("{e}.i64({x});"),
            Prim::U16 => format!("{e}.u16({x});"),
            Prim::U32 => format!("{e}.u32({x});"),
            Prim::F64 => format!("{e}.f64({x});"),
            Prim::Records => unreachable!("handled above"),
        },
        Ty::Struct(_) if opt => format!(
            "write_nullable_struct({e}, {x}.as_ref(), {nullable}, \"{what}\", |e, s| s.encode(e, version))?;"
        ),
        Ty::Struct(_) => format!("{x}.encode({e}, version)?;"),
    }
}

/// Expression producing a random value for field `f` (Rng is `r`).
fn random_field(f: &Field, within: Range) -> String {
    let nullable = Cond::of(f.nullable, within).expr();
    let opt = is_option(f);
    let elem = |t: &Ty| -> String {
        match t {
            Ty::Prim(p) => match p {
                Prim::Bool => "r.coin()".into(),
                Prim::I8 => "r.next() as i8".into(),
                Prim::I16 => "r.next() as i16".into(),
                Prim::I32 => "r.next() as i32".into(),
                Prim::I64 => "r.next() as i64".into(),
                Prim::U16 => "r.next() as u16".into(),
                Prim::U32 => "r.next() as u32".into(),
                Prim::F64 => "r.f64()".into(),
                Prim::Str => "r.string()".into(),
                Prim::Bytes => "r.bytes()".into(),
                Prim::Uuid => "r.uuid()".into(),
                Prim::Records => "r.records()".into(),
            },
            Ty::Struct(s) => format!("random_{}(r, version)", snake(s)),
            Ty::Array(_) => unreachable!(),
        }
    };
    match &f.ty {
        Ty::Prim(Prim::Records) => format!("r.maybe({nullable}, |r| r.records())"),
        Ty::Array(e) => {
            let v = format!("r.vec(|r| {})", elem(e));
            if opt {
                format!("r.maybe({nullable}, |r| {v})")
            } else {
                v
            }
        }
        t => {
            if opt {
                format!("r.maybe({nullable}, |r| {})", elem(t))
            } else {
                elem(t)
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Generation
// ---------------------------------------------------------------------------------------------

fn collect_structs(
    fields: &[Field],
    path: &str,
    out: &mut Vec<StructDef>,
    seen: &mut BTreeMap<String, ()>,
) -> Result<(), String> {
    for f in fields {
        let sname = match &f.ty {
            Ty::Struct(s) => Some(s),
            Ty::Array(e) => match e.as_ref() {
                Ty::Struct(s) => Some(s),
                _ => None,
            },
            _ => None,
        };
        match sname {
            Some(s) => {
                if f.fields.is_empty() {
                    return Err(format!("struct type {s} of field {} has no fields", f.name));
                }
                if seen.insert(s.clone(), ()).is_some() {
                    return Err(format!("struct name {s} is defined twice"));
                }
                let p = format!("{path}.{}", f.name);
                out.push(StructDef {
                    name: s.clone(),
                    fields: f.fields.clone(),
                    path: p.clone(),
                });
                collect_structs(&f.fields, &p, out, seen)?;
            }
            None => {
                if !f.fields.is_empty() {
                    return Err(format!(
                        "field {} of a primitive type has sub-fields",
                        f.name
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Smallest number of bytes an element of `s` can take at `version` (for the zero-size check).
fn min_size(fields: &[Field], version: i16, flexible: bool, all: &[StructDef]) -> usize {
    let mut n = usize::from(flexible);
    for f in fields {
        if !f.versions.contains(version) || f.tag.is_some() {
            continue;
        }
        n += match &f.ty {
            Ty::Prim(p) => match p {
                Prim::Bool | Prim::I8 => 1,
                Prim::I16 | Prim::U16 => 2,
                Prim::I32 | Prim::U32 => 4,
                Prim::I64 | Prim::F64 => 8,
                Prim::Uuid => 16,
                Prim::Str => {
                    if flexible {
                        1
                    } else {
                        2
                    }
                }
                Prim::Bytes | Prim::Records => {
                    if flexible {
                        1
                    } else {
                        4
                    }
                }
            },
            Ty::Array(_) => {
                if flexible {
                    1
                } else {
                    4
                }
            }
            Ty::Struct(s) => match all.iter().find(|d| &d.name == s) {
                Some(d) => min_size(&d.fields, version, flexible, all),
                None => 0,
            },
        };
    }
    n
}

fn check_no_zero_size_elements(
    m: &Message,
    fields: &[Field],
    all: &[StructDef],
) -> Result<(), String> {
    for f in fields {
        if let Ty::Array(e) = &f.ty {
            if let Ty::Struct(s) = e.as_ref() {
                let def = all.iter().find(|d| &d.name == s).ok_or("missing struct")?;
                for v in m.valid.lo..=m.valid.hi {
                    if f.versions.contains(v)
                        && min_size(&def.fields, v, m.flexible.contains(v), all) == 0
                    {
                        return Err(format!(
                            "array {} has zero-size elements at version {v}",
                            f.name
                        ));
                    }
                }
            }
        }
        check_no_zero_size_elements(m, &f.fields, all)?;
    }
    Ok(())
}

fn field_doc(f: &Field) -> String {
    let mut s = format!(
        "Field `{}`: {}, versions {}",
        f.name,
        type_name(&f.ty),
        f.versions.describe()
    );
    if !f.nullable.is_empty() {
        let _ = write!(s, ", nullable {}", f.nullable.describe());
    }
    if let Some(t) = f.tag {
        let _ = write!(s, ", tagged (tag {t})");
    }
    if let Some(d) = &f.default {
        let _ = write!(s, ", default {}", d.replace('"', "\\\""));
    }
    s.push('.');
    s
}

fn gen_all(messages: &[Message], code: &mut String, arb: &mut String) {
    let _ = writeln!(
        code,
        "// Generated by build.rs from schema/*.schema. Do not edit.\n"
    );
    let _ = writeln!(
        arb,
        "// Generated by build.rs from schema/*.schema. Do not edit.\n\
         // Pseudo-random values for every message, valid for a given version (tests only).\n\
         #[allow(unused_imports)]\nuse kafka_proto::messages::*;\n\
         use kafka_proto::frame::{{Request, Response}};\nuse kafka_proto::api::ApiKey;\n"
    );
    let _ = writeln!(arb, "{}", RNG_SOURCE);
    let mut req_arms = String::new();
    let mut resp_arms = String::new();
    for m in messages {
        if let Err(e) = gen_message(m, code, arb) {
            panic!("schema {}: {e}", m.module);
        }
        let arm = format!(
            "        ApiKey::{api} => {enum_}::{api}({module}::random_{snake}(r, version)),\n",
            api = m.api_name(),
            enum_ = if m.kind == "request" {
                "Request"
            } else {
                "Response"
            },
            module = m.module,
            snake = snake(&m.name),
        );
        if m.kind == "request" {
            req_arms.push_str(&arm);
        } else {
            resp_arms.push_str(&arm);
        }
    }
    let _ = writeln!(
        arb,
        "/// A random request body of `api` valid at `version`.\n\
         pub fn random_request(api: ApiKey, version: i16, r: &mut Rng) -> Request {{\n    match api {{\n{req_arms}    }}\n}}\n\n\
         /// A random response body of `api` valid at `version`.\n\
         pub fn random_response(api: ApiKey, version: i16, r: &mut Rng) -> Response {{\n    match api {{\n{resp_arms}    }}\n}}"
    );
}

fn gen_message(m: &Message, code: &mut String, arb: &mut String) -> Result<(), String> {
    let mut structs = vec![StructDef {
        name: m.name.clone(),
        fields: m.fields.clone(),
        path: m.name.clone(),
    }];
    let mut seen = BTreeMap::new();
    seen.insert(m.name.clone(), ());
    collect_structs(&m.fields, &m.name, &mut structs, &mut seen)?;
    check_no_zero_size_elements(m, &m.fields, &structs)?;
    let flexible_any = m.ever_flexible();

    let _ = writeln!(
        code,
        "/// `{name}` (API key {key}): versions {valid}, flexible versions {flex}.\n\
         #[allow(clippy::all, unused_variables, unused_mut)]\n\
         pub mod {module} {{\n    use super::*;\n",
        name = m.name,
        key = m.api_key,
        valid = m.valid.describe(),
        flex = m.flexible.intersect(m.valid).describe(),
        module = m.module,
    );
    let _ = writeln!(
        arb,
        "/// Random values for `{name}`.\n#[allow(clippy::all, unused_variables, unused_mut, unused_imports)]\npub mod {module} {{\n    use super::*;\n    use kafka_proto::messages::{module}::*;\n",
        name = m.name,
        module = m.module,
    );

    for (i, s) in structs.iter().enumerate() {
        gen_struct(m, s, i == 0, flexible_any, code)?;
        gen_random(m, s, flexible_any, arb)?;
    }

    // The Message trait for the top-level struct.
    let flex_from = if flexible_any {
        format!("Some({})", m.flexible.intersect(m.valid).lo)
    } else {
        "None".into()
    };
    let _ = writeln!(
        code,
        "    impl Message for {name} {{\n        const NAME: &'static str = \"{name}\";\n        const API_KEY: i16 = {key};\n        const LOWEST_VERSION: i16 = {lo};\n        const HIGHEST_VERSION: i16 = {hi};\n        const FLEXIBLE_FROM: Option<i16> = {flex_from};\n        fn decode(d: &mut Decoder, version: i16) -> Result<Self, DecodeError> {{\n            {name}::decode(d, version)\n        }}\n        fn encode(&self, e: &mut Encoder, version: i16) -> Result<(), EncodeError> {{\n            {name}::encode(self, e, version)\n        }}\n    }}\n}}\npub use {module}::{name};\n",
        name = m.name,
        key = m.api_key,
        lo = m.valid.lo,
        hi = m.valid.hi,
        module = m.module,
    );
    let _ = writeln!(arb, "}}\n");
    Ok(())
}

fn gen_struct(
    m: &Message,
    s: &StructDef,
    top: bool,
    flexible_any: bool,
    code: &mut String,
) -> Result<(), String> {
    let within = m.valid;
    let name = &s.name;
    if top {
        let _ = writeln!(
            code,
            "    /// The `{name}` body (API key {}), versions {}.",
            m.api_key,
            m.valid.describe()
        );
    } else {
        let _ = writeln!(code, "    /// An element of `{}`.", s.path);
    }
    let _ = writeln!(
        code,
        "    #[derive(Debug, Clone, PartialEq)]\n    pub struct {name} {{"
    );
    for f in &s.fields {
        let _ = writeln!(
            code,
            "        /// {}\n        pub {}: {},",
            field_doc(f),
            ident(&f.name),
            field_rust(f)
        );
    }
    if flexible_any {
        let _ = writeln!(
            code,
            "        /// Tagged fields this codec does not know, kept for the round trip.\n        pub unknown_tagged_fields: Vec<RawTaggedField>,"
        );
    }
    let _ = writeln!(code, "    }}\n");

    // Default.
    let _ = writeln!(
        code,
        "    impl Default for {name} {{\n        fn default() -> Self {{\n            {name} {{"
    );
    for f in &s.fields {
        let _ = writeln!(
            code,
            "                {}: {},",
            ident(&f.name),
            default_expr(f)?
        );
    }
    if flexible_any {
        let _ = writeln!(code, "                unknown_tagged_fields: Vec::new(),");
    }
    let _ = writeln!(code, "            }}\n        }}\n    }}\n");

    let flex_cond = Cond::of(m.flexible, within);
    let mut tagged: Vec<&Field> = s.fields.iter().filter(|f| f.tag.is_some()).collect();
    tagged.sort_by_key(|f| f.tag);
    for w in tagged.windows(2) {
        if w[0].tag == w[1].tag {
            return Err(format!("tag {:?} used twice in {name}", w[0].tag));
        }
    }

    // decode
    let _ = writeln!(code, "    impl {name} {{");
    let _ = writeln!(
        code,
        "        /// Decodes a `{name}` at `version`.\n        pub fn decode(d: &mut Decoder, version: i16) -> Result<Self, DecodeError> {{"
    );
    if top {
        let _ = writeln!(
            code,
            "            if !({lo}..={hi}).contains(&version) {{\n                return Err(DecodeError::UnsupportedVersion {{ api_key: {key}, version }});\n            }}",
            lo = m.valid.lo,
            hi = m.valid.hi,
            key = m.api_key
        );
    }
    let _ = writeln!(code, "            let flexible = {};", flex_cond.expr());
    let _ = writeln!(code, "            let mut this = {name}::default();");
    for f in s.fields.iter().filter(|f| f.tag.is_none()) {
        let body = format!(
            "this.{} = {};",
            ident(&f.name),
            read_field(f, "d", "flexible", within)
        );
        guarded(code, "            ", &Cond::of(f.versions, within), &body);
    }
    if flexible_any {
        let mut arms = String::new();
        for f in &tagged {
            let t = f.tag.unwrap_or_default();
            // A known tag in a version where its field does not exist is an error, as in
            // Kafka's generated readers ("Tag N is not valid for version V").
            let invalid = format!(
                "                    {t} => Err(DecodeError::TagNotValidForVersion {{ tag, version }}),\n"
            );
            let guard = match Cond::of(f.versions, within) {
                Cond::Never => {
                    arms.push_str(&invalid);
                    continue;
                }
                Cond::Always => String::new(),
                Cond::Expr(e) => format!(" if {e}"),
            };
            let _ = writeln!(
                arms,
                "                    {t}{guard} => {{\n                        let sub = &mut Decoder::new(data);\n                        this.{id} = {read};\n                        sub.finish()\n                    }}",
                id = ident(&f.name),
                read = read_field(f, "sub", "true", within)
            );
            if !guard.is_empty() {
                arms.push_str(&invalid);
            }
        }
        let body = format!(
            "d.tagged_fields(|tag, data| {{\n    match tag {{\n{arms}                    _ => {{\n                        this.unknown_tagged_fields.push(RawTaggedField {{ tag, data }});\n                        Ok(())\n                    }}\n    }}\n}})?;"
        );
        guarded(code, "            ", &Cond::Expr("flexible".into()), &body);
    }
    let _ = writeln!(code, "            Ok(this)\n        }}\n");

    // encode
    let _ = writeln!(
        code,
        "        /// Encodes this `{name}` at `version`; fields absent in that version are skipped.\n        pub fn encode(&self, e: &mut Encoder, version: i16) -> Result<(), EncodeError> {{"
    );
    if top {
        let _ = writeln!(
            code,
            "            if !({lo}..={hi}).contains(&version) {{\n                return Err(EncodeError::UnsupportedVersion {{ api_key: {key}, version }});\n            }}",
            lo = m.valid.lo,
            hi = m.valid.hi,
            key = m.api_key
        );
    }
    let _ = writeln!(code, "            let flexible = {};", flex_cond.expr());
    for f in s.fields.iter().filter(|f| f.tag.is_none()) {
        let what = format!("{name}.{}", f.name);
        let body = write_field(
            f,
            &format!("self.{}", ident(&f.name)),
            "e",
            "flexible",
            within,
            &what,
        );
        guarded(code, "            ", &Cond::of(f.versions, within), &body);
    }
    if flexible_any {
        let mut body = String::new();
        let mut count = Vec::new();
        for f in &tagged {
            let t = f.tag.unwrap_or_default();
            let nd = non_default_expr(f, &format!("self.{}", ident(&f.name)))?;
            let c = match Cond::of(f.versions, within) {
                Cond::Never => continue,
                Cond::Always => nd,
                Cond::Expr(e) => format!("{e} && {nd}"),
            };
            let _ = writeln!(body, "let write_{t} = {c};");
            count.push(format!("usize::from(write_{t})"));
        }
        count.push("self.unknown_tagged_fields.len()".into());
        let _ = writeln!(body, "write_tag_count(e, {})?;", count.join(" + "));
        let _ = writeln!(
            body,
            "let mut raw = RawTagWriter::new(&self.unknown_tagged_fields);"
        );
        for f in &tagged {
            if matches!(Cond::of(f.versions, within), Cond::Never) {
                continue;
            }
            let t = f.tag.unwrap_or_default();
            let what = format!("{name}.{}", f.name);
            let w = write_field(
                f,
                &format!("self.{}", ident(&f.name)),
                "e",
                "true",
                within,
                &what,
            );
            let _ = writeln!(
                body,
                "if write_{t} {{\n    raw.write_below(e, {t});\n    write_tagged(e, {t}, |e| {{\n        {w}\n        Ok(())\n    }})?;\n}}"
            );
        }
        let _ = writeln!(body, "raw.write_rest(e);");
        guarded(code, "            ", &Cond::Expr("flexible".into()), &body);
    }
    let _ = writeln!(code, "            Ok(())\n        }}\n    }}\n");
    Ok(())
}

fn gen_random(
    m: &Message,
    s: &StructDef,
    flexible_any: bool,
    arb: &mut String,
) -> Result<(), String> {
    let within = m.valid;
    let name = &s.name;
    let _ = writeln!(
        arb,
        "    /// A random `{name}` valid at `version`.\n    pub fn random_{sn}(r: &mut Rng, version: i16) -> {name} {{\n        let flexible = {flex};\n        let mut x = {name}::default();",
        sn = snake(name),
        flex = Cond::of(m.flexible, within).expr(),
    );
    let mut known_tags = Vec::new();
    for f in &s.fields {
        let val = random_field(f, within);
        let body = if let Some(t) = f.tag {
            known_tags.push(t.to_string());
            format!("if r.coin() {{\n    x.{} = {val};\n}}", ident(&f.name))
        } else {
            format!("x.{} = {val};", ident(&f.name))
        };
        guarded(arb, "        ", &Cond::of(f.versions, within), &body);
    }
    if flexible_any {
        let _ = writeln!(
            arb,
            "        if flexible {{\n            x.unknown_tagged_fields = r.unknown_tags(&[{}]);\n        }}",
            known_tags.join(", ")
        );
    }
    let _ = writeln!(arb, "        x\n    }}\n");
    Ok(())
}

const RNG_SOURCE: &str = r#"
/// A small deterministic PRNG (SplitMix64) for generated test values.
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }
    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    /// A fair coin.
    pub fn coin(&mut self) -> bool {
        self.next() & 1 == 1
    }
    /// A finite float.
    pub fn f64(&mut self) -> f64 {
        (self.next() >> 11) as f64 / 1024.0 - 1e12
    }
    /// A short string, sometimes with multi-byte characters.
    pub fn string(&mut self) -> String {
        const ALPHABET: &[&str] = &["a", "b", "z", "-", "_", "0", "9", "é", "日", "🦀", " "];
        let n = self.below(9);
        (0..n).map(|_| ALPHABET[self.below(ALPHABET.len() as u64) as usize]).collect()
    }
    /// A few random bytes.
    pub fn bytes(&mut self) -> bytes::Bytes {
        let n = self.below(12);
        (0..n).map(|_| self.next() as u8).collect::<Vec<u8>>().into()
    }
    /// Record data: sometimes empty, sometimes large (kept by reference), sometimes in two chunks.
    pub fn records(&mut self) -> kafka_proto::RecordChunks {
        let n = match self.below(4) {
            0 => 0,
            1 => self.below(40),
            _ => 500 + self.below(1200),
        } as usize;
        let data: bytes::Bytes = (0..n).map(|_| self.next() as u8).collect::<Vec<u8>>().into();
        if n > 2 && self.coin() {
            let mid = self.below(n as u64) as usize;
            kafka_proto::RecordChunks::from_chunks(vec![data.slice(..mid), data.slice(mid..)])
        } else {
            kafka_proto::RecordChunks::from(data)
        }
    }
    /// A random UUID.
    pub fn uuid(&mut self) -> kafka_proto::Uuid {
        kafka_proto::Uuid::from_u64_pair(self.next(), self.next())
    }
    /// 0 to 3 elements.
    pub fn vec<T>(&mut self, mut f: impl FnMut(&mut Rng) -> T) -> Vec<T> {
        let n = self.below(4);
        (0..n).map(|_| f(self)).collect()
    }
    /// `None` a quarter of the time when `nullable`, else a value.
    pub fn maybe<T>(&mut self, nullable: bool, f: impl FnOnce(&mut Rng) -> T) -> Option<T> {
        if nullable && self.below(4) == 0 {
            None
        } else {
            Some(f(self))
        }
    }
    /// Unknown tagged fields with tags not in `known`, in increasing order.
    pub fn unknown_tags(&mut self, known: &[u32]) -> Vec<kafka_proto::primitives::RawTaggedField> {
        let mut out = Vec::new();
        if self.below(3) != 0 {
            return out;
        }
        for tag in 0..12u32 {
            if !known.contains(&tag) && self.below(4) == 0 {
                out.push(kafka_proto::primitives::RawTaggedField { tag, data: self.bytes() });
            }
        }
        if self.below(8) == 0 {
            out.push(kafka_proto::primitives::RawTaggedField { tag: 200, data: self.bytes() });
        }
        out
    }
}
"#;
