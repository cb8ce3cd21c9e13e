//! Every shader source, assembled at compile time from the files in `shaders/`: a family's one
//! body behind its storage, reads and texel preludes.

/// A storage prelude (`store_f32`, or `store_bf16` after the bf16 bit rules).
macro_rules! store {
    (store_f32) => {
        include_str!("../../shaders/store_f32.wgsl")
    };
    (store_bf16) => {
        concat!(
            include_str!("../../shaders/bf16_bits.wgsl"),
            include_str!("../../shaders/store_bf16.wgsl")
        )
    };
}

/// The family in `shaders/<name>.wgsl` behind a storage prelude.
macro_rules! family {
    ($store:ident, $name:ident) => {
        concat!(
            store!($store),
            include_str!(concat!("../../shaders/", stringify!($name), ".wgsl"))
        )
    };
}

/// The attention family behind a storage prelude and a reads prelude (`reads_buffers`, or
/// `reads_texels`: att and dpre from texture copies), with the subgroup kernels when named.
macro_rules! attention {
    ($store:ident, $reads:ident $(, $more:ident)?) => {
        concat!(
            store!($store),
            include_str!(concat!("../../shaders/", stringify!($reads), ".wgsl")),
            include_str!("../../shaders/attention.wgsl")
            $(, include_str!(concat!("../../shaders/", stringify!($more), ".wgsl")))?
        )
    };
}

/// The matmul family behind a storage prelude, a texel prelude (`texels_f32`: f32 texels;
/// `texels_words`: packed bf16 texels, for products of two bf16 operands) and the texture
/// kernels' store of C (`c_words`: element by element; `c_quads`: a Quad at a time), with the
/// texture kernels' operand layouts fixed (A_ROWS, B_ROWS: rows layouts; both false unless
/// named).
macro_rules! matmul {
    ($store:ident, $texels:ident) => {
        matmul!(false, false, $store, $texels, c_words)
    };
    ($store:ident, $texels:ident, $c:ident) => {
        matmul!(false, false, $store, $texels, $c)
    };
    ($a:literal, $b:literal, $store:ident, $texels:ident) => {
        matmul!($a, $b, $store, $texels, c_words)
    };
    ($a:literal, $b:literal, $store:ident, $texels:ident, $c:ident) => {
        concat!(
            "const A_ROWS: bool = ",
            stringify!($a),
            ";\nconst B_ROWS: bool = ",
            stringify!($b),
            ";\n",
            store!($store),
            include_str!(concat!("../../shaders/", stringify!($texels), ".wgsl")),
            include_str!(concat!("../../shaders/", stringify!($c), ".wgsl")),
            include_str!("../../shaders/matmul.wgsl")
        )
    };
}

/// The subgroup matmul kernel with its operands' rows layouts (A_ROWS, B_ROWS) and its store of
/// C fixed.
macro_rules! subgroup {
    ($a:literal, $b:literal, $store:ident, $texels:ident) => {
        subgroup!($a, $b, $store, $texels, c_words)
    };
    ($a:literal, $b:literal, $store:ident, $texels:ident, $c:ident) => {
        concat!(
            matmul!($a, $b, $store, $texels, $c),
            include_str!("../../shaders/matmul_subgroup.wgsl")
        )
    };
}

/// Every shader source, by family name. The run record hashes these. Each family that stores
/// tensors of the model's precision (`attention`, `elementwise`, `encoder`, `matmul`, `norm`,
/// `optim`) is one body behind a storage prelude: `store_f32.wgsl`, or `store_bf16.wgsl` after
/// the bit rules of `bf16_bits.wgsl` (`<family>_bf16`); bf16 packing begins with the same bit
/// rules, and `loss` works on f32 only.
pub const SHADERS: &[(&str, &str)] = &[
    ("attention", attention!(store_f32, reads_buffers)),
    ("attention_bf16", attention!(store_bf16, reads_buffers)),
    ("attention_t", attention!(store_f32, reads_texels)),
    ("attention_t_bf16", attention!(store_bf16, reads_texels)),
    (
        "attention_subgroup",
        attention!(store_f32, reads_buffers, attention_subgroup),
    ),
    (
        "attention_subgroup_bf16",
        attention!(store_bf16, reads_buffers, attention_subgroup),
    ),
    (
        "attention_subgroup_t",
        attention!(store_f32, reads_texels, attention_subgroup),
    ),
    (
        "attention_subgroup_t_bf16",
        attention!(store_bf16, reads_texels, attention_subgroup),
    ),
    (
        "bf16",
        concat!(
            include_str!("../../shaders/bf16_bits.wgsl"),
            include_str!("../../shaders/bf16.wgsl")
        ),
    ),
    ("elementwise", family!(store_f32, elementwise)),
    ("elementwise_bf16", family!(store_bf16, elementwise)),
    ("encoder", family!(store_f32, encoder)),
    ("encoder_bf16", family!(store_bf16, encoder)),
    ("loss", include_str!("../../shaders/loss.wgsl")),
    ("matmul", matmul!(store_f32, texels_f32)),
    ("matmul_a_rows", matmul!(true, false, store_f32, texels_f32)),
    ("matmul_b_rows", matmul!(false, true, store_f32, texels_f32)),
    ("matmul_bf16", matmul!(store_bf16, texels_f32)),
    (
        "matmul_bf16_a_rows",
        matmul!(true, false, store_bf16, texels_f32),
    ),
    (
        "matmul_bf16_b_rows",
        matmul!(false, true, store_bf16, texels_f32),
    ),
    ("matmul_bf16_words", matmul!(store_bf16, texels_words)),
    (
        "matmul_bf16_words_a_rows",
        matmul!(true, false, store_bf16, texels_words),
    ),
    (
        "matmul_bf16_words_b_rows",
        matmul!(false, true, store_bf16, texels_words),
    ),
    ("matmul_q", matmul!(store_f32, texels_f32, c_quads)),
    (
        "matmul_q_a_rows",
        matmul!(true, false, store_f32, texels_f32, c_quads),
    ),
    (
        "matmul_q_b_rows",
        matmul!(false, true, store_f32, texels_f32, c_quads),
    ),
    ("matmul_bf16_q", matmul!(store_bf16, texels_f32, c_quads)),
    (
        "matmul_bf16_q_a_rows",
        matmul!(true, false, store_bf16, texels_f32, c_quads),
    ),
    (
        "matmul_bf16_q_b_rows",
        matmul!(false, true, store_bf16, texels_f32, c_quads),
    ),
    (
        "matmul_bf16_words_q",
        matmul!(store_bf16, texels_words, c_quads),
    ),
    (
        "matmul_bf16_words_q_a_rows",
        matmul!(true, false, store_bf16, texels_words, c_quads),
    ),
    (
        "matmul_bf16_words_q_b_rows",
        matmul!(false, true, store_bf16, texels_words, c_quads),
    ),
    (
        "matmul_subgroup",
        subgroup!(false, false, store_f32, texels_f32),
    ),
    (
        "matmul_subgroup_a_rows",
        subgroup!(true, false, store_f32, texels_f32),
    ),
    (
        "matmul_subgroup_b_rows",
        subgroup!(false, true, store_f32, texels_f32),
    ),
    (
        "matmul_subgroup_q",
        subgroup!(false, false, store_f32, texels_f32, c_quads),
    ),
    (
        "matmul_subgroup_a_rows_q",
        subgroup!(true, false, store_f32, texels_f32, c_quads),
    ),
    (
        "matmul_subgroup_b_rows_q",
        subgroup!(false, true, store_f32, texels_f32, c_quads),
    ),
    (
        "matmul_subgroup_bf16",
        subgroup!(false, false, store_bf16, texels_f32),
    ),
    (
        "matmul_subgroup_bf16_a_rows",
        subgroup!(true, false, store_bf16, texels_f32),
    ),
    (
        "matmul_subgroup_bf16_b_rows",
        subgroup!(false, true, store_bf16, texels_f32),
    ),
    (
        "matmul_subgroup_bf16_q",
        subgroup!(false, false, store_bf16, texels_f32, c_quads),
    ),
    (
        "matmul_subgroup_bf16_a_rows_q",
        subgroup!(true, false, store_bf16, texels_f32, c_quads),
    ),
    (
        "matmul_subgroup_bf16_b_rows_q",
        subgroup!(false, true, store_bf16, texels_f32, c_quads),
    ),
    (
        "matmul_subgroup_words",
        subgroup!(false, false, store_bf16, texels_words),
    ),
    (
        "matmul_subgroup_words_a_rows",
        subgroup!(true, false, store_bf16, texels_words),
    ),
    (
        "matmul_subgroup_words_b_rows",
        subgroup!(false, true, store_bf16, texels_words),
    ),
    (
        "matmul_subgroup_words_q",
        subgroup!(false, false, store_bf16, texels_words, c_quads),
    ),
    (
        "matmul_subgroup_words_a_rows_q",
        subgroup!(true, false, store_bf16, texels_words, c_quads),
    ),
    (
        "matmul_subgroup_words_b_rows_q",
        subgroup!(false, true, store_bf16, texels_words, c_quads),
    ),
    ("norm", family!(store_f32, norm)),
    ("norm_bf16", family!(store_bf16, norm)),
    ("optim", family!(store_f32, optim)),
    ("optim_bf16", family!(store_bf16, optim)),
];
