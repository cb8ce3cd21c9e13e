//! The kernels of a model's precision: every method calls the f32 kernel, or under bf16 its
//! packed twin ([`crate::kernels::packed`]), with the f32 kernel's arguments. Views of bf16
//! tensors are packed words; layernorm statistics, losses, logits and their gradient are f32 in
//! both precisions.

use crate::error::Result;
use crate::gpu::{Gpu, View};
use crate::kernels::matmul::Linear;
use crate::kernels::packed::attention as pa;
use crate::kernels::{
    attention as ka, elementwise as ke, encoder as kenc, matmul as km, norm as kn, Op,
};
use crate::precision::Precision;

pub(super) struct Kernels<'a> {
    pub g: &'a Gpu,
    pub p: Precision,
}

#[allow(clippy::too_many_arguments)]
impl Kernels<'_> {
    pub fn encoder_forward(
        &self,
        out: &View,
        tokens: &View,
        wte: &View,
        wpe: &View,
        b: usize,
        t: usize,
        c: usize,
    ) -> Result<Vec<Op>> {
        kenc::encoder_forward(self.g, self.p, out, tokens, wte, wpe, b, t, c)
    }

    pub fn encoder_backward(
        &self,
        dwte: &View,
        dwpe: &View,
        dout: &View,
        tokens: &View,
        b: usize,
        t: usize,
        c: usize,
        v: usize,
    ) -> Result<Vec<Op>> {
        let p = self.p;
        kenc::encoder_backward(self.g, p, dwte, dwpe, dout, tokens, b, t, c, v)
    }

    pub fn layernorm_forward(
        &self,
        out: &View,
        mean: &View,
        rstd: &View,
        inp: &View,
        w: &View,
        bias: &View,
        n: usize,
        c: usize,
    ) -> Result<Vec<Op>> {
        kn::layernorm_forward(self.g, self.p, out, mean, rstd, inp, w, bias, n, c)
    }

    pub fn layernorm_backward(
        &self,
        dinp: &View,
        dw: &View,
        db: &View,
        dout: &View,
        inp: &View,
        w: &View,
        mean: &View,
        rstd: &View,
        n: usize,
        c: usize,
    ) -> Result<Vec<Op>> {
        let p = self.p;
        kn::layernorm_backward(self.g, p, dinp, dw, db, dout, inp, w, mean, rstd, n, c)
    }

    /// The linear layer of this precision; `f32_io`: the head, whose logits and dlogits are f32.
    fn linear(&self, f32_io: bool) -> Linear {
        let l = Linear::new(self.p);
        if f32_io {
            l.head()
        } else {
            l
        }
    }

    /// A linear layer's product; `f32_out` (the head's logits): the output stays f32.
    pub fn matmul_forward(
        &self,
        out: &View,
        inp: &View,
        w: &View,
        bias: Option<&View>,
        n: usize,
        c: usize,
        oc: usize,
        f32_out: bool,
    ) -> Result<Vec<Op>> {
        km::matmul_forward(self.g, self.linear(f32_out), out, inp, w, bias, n, c, oc)
    }

    /// dinp = dout·W, dW += doutᵀ·inp, db += Σ dout; `f32_dout` (the head's dlogits).
    pub fn matmul_backward(
        &self,
        dinp: &View,
        dw: &View,
        db: Option<&View>,
        dout: &View,
        inp: &View,
        w: &View,
        n: usize,
        c: usize,
        oc: usize,
        f32_dout: bool,
    ) -> Result<Vec<Op>> {
        let l = self.linear(f32_dout);
        km::matmul_backward(self.g, l, dinp, dw, db, dout, inp, w, n, c, oc)
    }

    /// The zero-bubble split's input half: dinp = dout·W; `f32_dout` (the head's dlogits).
    pub fn matmul_backward_input(
        &self,
        dinp: &View,
        dout: &View,
        w: &View,
        n: usize,
        c: usize,
        oc: usize,
        f32_dout: bool,
    ) -> Result<Vec<Op>> {
        km::matmul_backward_input(self.g, self.linear(f32_dout), dinp, dout, w, n, c, oc)
    }

    /// The split's weight half W: dW += doutᵀ·inp, db += Σ dout.
    pub fn matmul_backward_weight(
        &self,
        dw: &View,
        db: Option<&View>,
        dout: &View,
        inp: &View,
        n: usize,
        c: usize,
        oc: usize,
        f32_dout: bool,
    ) -> Result<Vec<Op>> {
        km::matmul_backward_weight(self.g, self.linear(f32_dout), dw, db, dout, inp, n, c, oc)
    }

    pub fn attention_forward(
        &self,
        out: &View,
        att: &View,
        qkv: &View,
        b: usize,
        t: usize,
        c: usize,
        nh: usize,
    ) -> Result<Vec<Op>> {
        match self.p == Precision::Bf16 {
            true => pa::attention_forward_bf16(self.g, out, att, qkv, b, t, c, nh),
            false => ka::attention_forward(self.g, out, att, qkv, b, t, c, nh),
        }
    }

    pub fn attention_backward(
        &self,
        dqkv: &View,
        datt: &View,
        dout: &View,
        qkv: &View,
        att: &View,
        b: usize,
        t: usize,
        c: usize,
        nh: usize,
    ) -> Result<Vec<Op>> {
        let g = self.g;
        match self.p == Precision::Bf16 {
            true => pa::attention_backward_bf16(g, dqkv, datt, dout, qkv, att, b, t, c, nh),
            false => ka::attention_backward(g, dqkv, datt, dout, qkv, att, b, t, c, nh),
        }
    }

    pub fn residual_forward(&self, out: &View, a: &View, b: &View, n: usize) -> Result<Op> {
        ke::residual_forward(self.g, self.p, out, a, b, n)
    }

    pub fn gelu_forward(&self, out: &View, inp: &View, n: usize) -> Result<Op> {
        ke::gelu_forward(self.g, self.p, out, inp, n)
    }

    pub fn gelu_backward(&self, dinp: &View, inp: &View, dout: &View, n: usize) -> Result<Op> {
        ke::gelu_backward(self.g, self.p, dinp, inp, dout, n)
    }

    pub fn fill(&self, out: &View, value: f32) -> Result<Op> {
        ke::fill(self.g, self.p, out, value)
    }

    /// A raw copy (words under bf16: no float operation touches the bits).
    pub fn copy(&self, out: &View, a: &View) -> Result<Op> {
        ke::copy(self.g, self.p, out, a)
    }
}
