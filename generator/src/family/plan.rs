//! Plan data shared by every family: block order, where a tile came from,
//! and why a plan could not be made.

use serde::Serialize;
use std::fmt;

/// Order in which a thread visits its mini-GEMV blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum BlockOrder {
    /// Column panel by column panel, K blocks inside: the weight stream is
    /// sequential and `y` stays hot; best when `x` fits in L2.
    Panel,
    /// Z-curve (Morton) order over (K block, panel): keeps both `x` and `y`
    /// blocks close when neither fits in L2.
    ZCurve,
}

/// Where the micro tile came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum TileSource {
    /// Ranked by the performance model.
    Model,
    /// Read from a tuning profile.
    Profile(String),
    /// Set by the caller.
    Fixed,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanError(pub String);

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no plan: {}", self.0)
    }
}

impl std::error::Error for PlanError {}
