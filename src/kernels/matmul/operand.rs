//! An operand of a product as it is stored: a view, its element type and layout, used as is or
//! transposed.

use crate::gpu::View;
use crate::precision::Precision;

/// An operand as stored: `sr × sc` row-major with row stride `ld` elements, used as is or
/// transposed (`t`), its elements in `ty`. Logical element (r, c) lives at element `r·ld + c`,
/// or `c·ld + r` when transposed.
#[derive(Clone)]
pub(super) struct Mat {
    pub(super) v: View,
    pub(super) ty: Precision,
    pub(super) sr: usize,
    pub(super) sc: usize,
    pub(super) ld: usize,
    pub(super) t: bool,
}

impl Mat {
    pub(super) fn new(v: &View, ty: Precision, rows: usize, cols: usize) -> Mat {
        Mat {
            v: v.slice(0, ty.words(rows * cols)),
            ty,
            sr: rows,
            sc: cols,
            ld: cols,
            t: false,
        }
    }
    pub(super) fn t(self) -> Mat {
        Mat { t: !self.t, ..self }
    }
    pub(super) fn rows(&self) -> usize {
        if self.t {
            self.sc
        } else {
            self.sr
        }
    }
    pub(super) fn cols(&self) -> usize {
        if self.t {
            self.sr
        } else {
            self.sc
        }
    }
}
