//! The families of layouts the planner ranks apart: the rows of the decision guide.

use crate::mesh::Mesh;

/// A family of layouts: one row of the decision guide. Ordered simplest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    PureDp,
    Zero,
    Tensor,
    Pipeline,
}

impl Family {
    /// All families, simplest first.
    pub const ALL: [Family; 4] = [
        Family::PureDp,
        Family::Zero,
        Family::Tensor,
        Family::Pipeline,
    ];

    /// The family a layout belongs to: pp > 1 → PP; else tp > 1 → TP; else ZeRO ≥ 1 with
    /// dp > 1 → ZeRO; else pure DP.
    pub fn of(layout: &Mesh) -> Family {
        if layout.pp > 1 {
            Family::Pipeline
        } else if layout.tp > 1 {
            Family::Tensor
        } else if layout.zero != 0 && layout.dp > 1 {
            Family::Zero
        } else {
            Family::PureDp
        }
    }

    /// A short name for printing.
    pub fn name(self) -> &'static str {
        match self {
            Family::PureDp => "pure DP",
            Family::Zero => "ZeRO/FSDP",
            Family::Tensor => "tensor par.",
            Family::Pipeline => "pipeline",
        }
    }

    /// The row of docs/design.md's table: situation → split.
    pub fn rule(self) -> &'static str {
        match self {
            Family::PureDp => "the model fits on one card → pure data parallel",
            Family::Zero => "optimizer state is too big → ZeRO stage 1–3 / FSDP",
            Family::Tensor => "one layer no longer fits → tensor parallel, inside a node",
            Family::Pipeline => {
                "very many layers → pipeline parallel with many small microbatches (m ≥ 4p)"
            }
        }
    }
}
