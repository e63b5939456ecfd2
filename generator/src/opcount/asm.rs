//! `asm!` templates read as instruction lines and operand register classes.

use super::*;
use std::collections::BTreeMap;

/// One line of an `asm!` template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum AsmLine {
    Label(String),
    Insn(String),
}

/// An `asm!` invocation: its template lines and its operands' register
/// classes, which tell vector instructions from scalar bookkeeping
/// (pointer increments, loop counters).
pub(crate) struct Asm {
    pub(crate) lines: Vec<AsmLine>,
    /// Register class by operand name, or by position for unnamed ones.
    pub(crate) classes: BTreeMap<String, String>,
}

impl Asm {
    pub(crate) fn parse(tokens: &proc_macro2::TokenStream) -> Result<Asm, String> {
        use proc_macro2::TokenTree as T;
        let mut segs: Vec<Vec<T>> = vec![Vec::new()];
        for tt in tokens.clone() {
            match &tt {
                T::Punct(p) if p.as_char() == ',' => segs.push(Vec::new()),
                _ => segs.last_mut().expect("one segment").push(tt),
            }
        }
        let mut templates = Vec::new();
        let mut rest = segs.as_slice();
        while let Some((first, tail)) = rest.split_first() {
            let lit = match first.as_slice() {
                [T::Literal(l)] => syn::parse2::<syn::LitStr>(T::Literal(l.clone()).into()).ok(),
                _ => None,
            };
            match lit {
                Some(l) => templates.push(l.value()),
                None => break,
            }
            rest = tail;
        }
        if templates.is_empty() {
            return Err("asm! whose template is not a string literal".into());
        }
        let mut classes = BTreeMap::new();
        let mut positional = 0;
        for seg in rest {
            let (name, op) = match seg.as_slice() {
                [T::Ident(n), T::Punct(p), op @ ..] if p.as_char() == '=' => {
                    (Some(n.to_string()), op)
                }
                op => (None, op),
            };
            let dir = match op.first() {
                Some(T::Ident(d)) => d.to_string(),
                _ => continue,
            };
            if matches!(dir.as_str(), "options" | "clobber_abi") {
                continue;
            }
            let key = name.unwrap_or_else(|| {
                positional += 1;
                (positional - 1).to_string()
            });
            if let Some(T::Group(g)) = op.get(1) {
                let class = g.stream().to_string().trim_matches('"').to_string();
                classes.insert(key, class);
            }
        }
        let mut lines = Vec::new();
        for t in &templates {
            for line in t.split(['\n', ';']) {
                let mut line = line.split("//").next().unwrap_or("").trim();
                if let Some((label, after)) = line.split_once(':') {
                    let is_label = !label.is_empty()
                        && label
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || "_.$".contains(c));
                    if is_label {
                        lines.push(AsmLine::Label(label.to_string()));
                        line = after.trim();
                    }
                }
                if !line.is_empty() && !line.starts_with('.') && !line.starts_with('#') {
                    lines.push(AsmLine::Insn(line.to_string()));
                }
            }
        }
        Ok(Asm { lines, classes })
    }

    /// Whether an instruction's operands name a vector register, literally
    /// or through an operand of a vector class (an unknown operand counts
    /// as vector, so nothing is dropped silently).
    pub(crate) fn is_vector(&self, operands: &str) -> bool {
        let text = operands.replace("{{", " ").replace("}}", " ");
        let mut bare = String::new();
        let mut rest = text.as_str();
        while let Some(open) = rest.find('{') {
            bare.push_str(&rest[..open]);
            let close = rest[open..].find('}').map_or(rest.len(), |c| open + c);
            let inner = &rest[open + 1..close.min(rest.len())];
            let name = inner.split(':').next().unwrap_or("").trim();
            match self.classes.get(name) {
                Some(class) if class.starts_with("reg") => {}
                _ => return true,
            }
            rest = rest.get(close + 1..).unwrap_or("");
        }
        bare.push_str(rest);
        bare.split(|c: char| !c.is_ascii_alphanumeric())
            .any(is_vector_register)
    }

    pub(crate) fn insn(&self, line: &str) -> Counts {
        let (m, operands) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        let m = m.to_ascii_lowercase();
        if is_branch(&m) {
            return Counts::default();
        }
        if m.starts_with("ld1r") || m.starts_with("prf") || m.starts_with("prefetch") {
            return broadcast();
        }
        if m.starts_with("ld") {
            return one(Class::Load);
        }
        if m.starts_with("st") {
            return one(Class::Store);
        }
        const DOT: &[&str] = &[
            "sdot", "udot", "usdot", "sudot", "smmla", "ummla", "usmmla", "bfdot", "bfmmla",
        ];
        const X86_DOT: &[&str] = &[
            "dpbusd",
            "dpbssd",
            "dpwssd",
            "pmaddubsw",
            "pmaddwd",
            "dpbf16",
        ];
        const FMA: &[&str] = &[
            "fmla", "fmls", "fmlal", "fmlal2", "fmlsl", "fmlsl2", "mla", "mls", "smlal", "smlal2",
            "umlal", "umlal2", "sqdmlal", "sqdmlal2", "fmad", "fmadd", "fmsub", "fnmadd", "fnmsub",
            "bfmlalb", "bfmlalt",
        ];
        let alu = if DOT.contains(&m.as_str())
            || X86_DOT.iter().any(|d| m.contains(d))
            || m.starts_with("tdp")
        {
            Class::Mac { dot: true }
        } else if FMA.contains(&m.as_str())
            || ["vfmadd", "vfmsub", "vfnmadd", "vfnmsub"]
                .iter()
                .any(|p| m.starts_with(p))
        {
            Class::Mac { dot: false }
        } else if ["vmulps", "vmulpd", "mulps", "mulpd", "fmul"].contains(&m.as_str()) {
            Class::FMul
        } else if [
            "vpshufb", "pshufb", "vpermb", "vpermi2b", "vpermt2b", "tbl", "tbx",
        ]
        .contains(&m.as_str())
        {
            Class::Shuffle
        } else {
            Class::Op
        };
        let alu = if self.is_vector(operands) {
            one(alu)
        } else {
            Counts::default()
        };
        if operands.split(',').any(is_memory_operand) {
            // Intel syntax: a memory operand first is a destination.
            let first_is_mem = operands.split(',').next().is_some_and(is_memory_operand);
            let mem = one(if first_is_mem {
                Class::Store
            } else {
                Class::Load
            });
            if m.contains("broadcast") && !first_is_mem {
                return broadcast();
            }
            // An EVEX embedded broadcast (`[p]{1to16}`): the load broadcasts.
            if operands.contains("1to") && !first_is_mem {
                return alu + broadcast();
            }
            if m.contains("mov") || m.contains("broadcast") {
                return mem;
            }
            return alu + mem;
        }
        alu
    }

    pub(crate) fn count(&self, lines: &[AsmLine]) -> Counts {
        lines
            .iter()
            .map(|l| match l {
                AsmLine::Insn(i) => self.insn(i),
                AsmLine::Label(_) => Counts::default(),
            })
            .fold(Counts::default(), |a, b| a + b)
    }

    /// The lines of the outermost loop: from a label to the last backward
    /// branch to it (`2:` .. `b.ne 2b`), and whether it holds inner loops.
    pub(crate) fn block_loop(&self) -> Option<(&[AsmLine], bool)> {
        let mut loops = Vec::new();
        for (j, line) in self.lines.iter().enumerate() {
            let AsmLine::Insn(insn) = line else { continue };
            let (m, operands) = insn.split_once(char::is_whitespace).unwrap_or((insn, ""));
            if !is_branch(&m.to_ascii_lowercase()) {
                continue;
            }
            let target = operands.rsplit(',').next().unwrap_or("").trim();
            let label = match target.strip_suffix('b') {
                Some(n) if !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()) => n,
                _ => target,
            };
            let def = AsmLine::Label(label.to_string());
            if let Some(i) = self.lines[..j].iter().rposition(|l| *l == def) {
                loops.push((i + 1, j));
            }
        }
        let &(start, end) = loops.iter().max_by_key(|(s, e)| e - s)?;
        let nested = loops
            .iter()
            .any(|&(s, e)| (s, e) != (start, end) && s >= start && e <= end);
        Some((&self.lines[start..end], nested))
    }
}
