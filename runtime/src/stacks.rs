//! Stacks of experts that older GGUF files store one tensor per expert.
//!
//! Mixture-of-experts files store a layer's experts as one 3-D tensor
//! (`blk.N.ffn_up_exps.weight`, `dims = [k, n, experts]`). Mixtral files
//! converted before llama.cpp merged them (early 2024, still in circulation)
//! hold one 2-D tensor per expert instead: `blk.N.ffn_up.E.weight` for
//! `E = 0, 1, ..`. [`SplitStacks`] finds those groups once, when the file is
//! opened, under the merged name, so a caller asks for
//! `blk.N.ffn_up_exps.weight` whichever way the file stores it.

use crate::error::Error;
use crate::gguf::{GgufFile, MAX_STACK};
use std::collections::{BTreeMap, HashMap};

/// The feed-forward projections llama.cpp stored per expert.
const KINDS: [&str; 3] = ["ffn_gate", "ffn_up", "ffn_down"];

/// A file's per-expert tensors, grouped by the merged stack's name.
#[derive(Debug, Default)]
pub(crate) struct SplitStacks {
    /// Merged name -> the experts' tensor names, expert 0 first.
    groups: BTreeMap<String, Vec<String>>,
    /// Tensor name -> (merged name, expert).
    member: HashMap<String, (String, usize)>,
}

/// `blk.N.ffn_up.E.weight` as (`blk.N.ffn_up_exps.weight`, E).
fn parse(name: &str) -> Option<(String, usize)> {
    let mut parts = name.split('.');
    let (blk, layer, kind, expert, weight) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    // Decimal, without the leading zeros that would give one expert two names.
    let decimal = |s: &str| {
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'))
    };
    if parts.next().is_some()
        || blk != "blk"
        || weight != "weight"
        || !KINDS.contains(&kind)
        || !decimal(layer)
        || !decimal(expert)
    {
        return None;
    }
    // More digits than any stack has experts: not an expert index.
    let e: usize = expert.parse().ok().filter(|&e| (e as u64) < MAX_STACK)?;
    Some((format!("blk.{layer}.{kind}_exps.weight"), e))
}

impl SplitStacks {
    /// Finds the per-expert groups of `file`. A group must be experts
    /// `0..E` of one type and 2-D shape, not also stored merged, and as many as
    /// `{arch}.expert_count` says where the file says it; otherwise the
    /// file is corrupt ([`Error::Load`], naming the tensors).
    pub(crate) fn find(file: &GgufFile) -> Result<SplitStacks, Error> {
        let path = file.path().display();
        let mut found: BTreeMap<String, Vec<(usize, &str)>> = BTreeMap::new();
        for t in file.tensors() {
            if let Some((merged, e)) = parse(&t.name) {
                found.entry(merged).or_default().push((e, &t.name));
            }
        }
        let mut out = SplitStacks::default();
        for (merged, mut experts) in found {
            experts.sort_unstable();
            if file.tensor_info(&merged).is_some() {
                return Err(Error::Load(format!(
                    "{path}: tensor {merged:?} is stored both merged and as {} per-expert tensors ({:?}, ..)",
                    experts.len(),
                    experts[0].1
                )));
            }
            if let Some((i, &(e, name))) = experts.iter().enumerate().find(|(i, (e, _))| e != i) {
                return Err(Error::Load(format!(
                    "{path}: per-expert tensor {name:?} is expert {e} of {merged:?}, but expert {i} is missing"
                )));
            }
            let first = file.tensor_info(experts[0].1).expect("listed");
            if first.dims.len() != 2 {
                return Err(Error::Load(format!(
                    "{path}: per-expert tensor {:?} of {merged:?} has {} dimensions {:?}, not 2",
                    first.name,
                    first.dims.len(),
                    first.dims
                )));
            }
            for &(_, name) in &experts[1..] {
                let t = file.tensor_info(name).expect("listed");
                if (t.type_id, &t.dims) != (first.type_id, &first.dims) {
                    return Err(Error::Load(format!(
                        "{path}: per-expert tensor {name:?} is {} {:?}, expert 0 of {merged:?} ({:?}) is {} {:?}",
                        t.type_name(),
                        t.dims,
                        first.name,
                        first.type_name(),
                        first.dims
                    )));
                }
            }
            if let Some(count) = file.expert_count() {
                if experts.len() as u64 != u64::from(count) {
                    return Err(Error::Load(format!(
                        "{path}: {merged:?} has {} per-expert tensors ({:?}, ..), but the metadata says {count} experts",
                        experts.len(),
                        first.name
                    )));
                }
            }
            let names: Vec<String> = experts.iter().map(|&(_, n)| n.to_string()).collect();
            for (e, n) in names.iter().enumerate() {
                out.member.insert(n.clone(), (merged.clone(), e));
            }
            out.groups.insert(merged, names);
        }
        Ok(out)
    }

    /// The experts' tensor names of the merged stack `merged`, expert 0
    /// first, if the file stores it per expert.
    pub(crate) fn experts(&self, merged: &str) -> Option<&[String]> {
        self.groups.get(merged).map(Vec::as_slice)
    }

    /// Which stack (merged name) and expert the tensor `name` is, if it is
    /// one of a per-expert group.
    pub(crate) fn member(&self, name: &str) -> Option<(&str, usize)> {
        self.member.get(name).map(|(m, e)| (m.as_str(), *e))
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn only_llama_cpps_per_expert_names_are_members() {
        assert_eq!(
            parse("blk.3.ffn_up.7.weight"),
            Some(("blk.3.ffn_up_exps.weight".into(), 7))
        );
        assert_eq!(
            parse("blk.0.ffn_down.0.weight"),
            Some(("blk.0.ffn_down_exps.weight".into(), 0))
        );
        for name in [
            "blk.3.ffn_up.weight",
            "blk.3.ffn_up_exps.weight",
            "blk.3.attn_q.7.weight",
            "blk.3.ffn_up.7.bias",
            "blk.3.ffn_up.7.weight.x",
            "blk.x.ffn_up.7.weight",
            "blk.3.ffn_up.-7.weight",
            "blk.3.ffn_up.+7.weight",
            "blk.3.ffn_up.07.weight",
            "blk.3.ffn_up.99999999999999999999999.weight",
            "model.3.ffn_up.7.weight",
        ] {
            assert_eq!(parse(name), None, "{name}");
        }
    }
}
