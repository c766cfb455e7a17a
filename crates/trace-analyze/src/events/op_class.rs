//! The op kind ([`OpClass`]): one vocabulary for Candle's ops and torch's ATen ops, by name.
//!
//! Torch and Candle name the same work differently (`aten::addmm` and `Linear::forward`,
//! `aten::_softmax` and `softmax_last_dim`), so a comparison by name alone lines up little.
//! [`OpClass::of_aten`] and [`OpClass::of_candle`] map each side's names onto one small set
//! of kinds, from the tables [`ATEN_OP_CLASSES`], [`CANDLE_OP_CLASSES`] and
//! [`CANDLE_LAYER_CLASSES`] (exact names first, then the documented rules of each function).
//! A name no table knows is [`OpClass::Other`]: whoever reports it keeps its name, nothing is
//! dropped.
//!
//! Views (`aten::view`, `transpose`, `narrow`, ...) cost no data movement in either framework
//! but appear as ops with a dispatch cost; they are [`OpClass::View`], apart from the copies
//! ([`OpClass::CopyLayout`]) they are easily mistaken for. Where a view must copy (torch's
//! `reshape` of a non-contiguous tensor), torch records the copy as a child op (`aten::clone`,
//! `aten::copy_`), so the view's own time stays a view's.

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use crate::model::intern::FastMap;

/// The op kind: what an op does, the same for Candle's and torch's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpClass {
    /// Matrix products: `mm`, `addmm`, `bmm`, `matmul`, `linear`, Candle's `matmul` and
    /// `Linear::forward`.
    Matmul,
    /// Fused attention: `scaled_dot_product_attention`, flash and memory-efficient kernels.
    Attention,
    /// Softmax and log-softmax.
    Softmax,
    /// Normalisations: layer, RMS, group and batch norm.
    Norm,
    /// Element-wise math: arithmetic, activations (`silu`, `gelu`, `relu`), `exp`, `sqrt`,
    /// comparisons, `where`, `affine`, `clamp`, `powf`, dropout.
    Elementwise,
    /// Reductions and selections along a dimension: `sum`, `mean`, `max`, `argmax`, `var`,
    /// `cumsum`, `topk`, sorting, pooling.
    Reduction,
    /// Rotary position embeddings (Candle's `rope`, `rope_i`, `rope_thd`).
    Rope,
    /// Concatenation: `cat`, `stack`, KV-cache appends.
    Concat,
    /// Data movement that copies: `copy_`, `contiguous`, `clone`, `to`, `_to_copy`, Candle's
    /// `copy_strided_src`, `copy2d`, `to_dtype` (a copy with a new element type).
    CopyLayout,
    /// Views: `view`, `transpose`, `permute`, `unsqueeze`, `slice`, `narrow`, `select`, `t`,
    /// `expand`, `as_strided`, `reshape`, `_unsafe_view`. No data moves; their time is
    /// dispatch overhead.
    View,
    /// Embedding lookups and indexing: `embedding`, `index_select`, `gather`, `scatter`,
    /// `index`.
    Indexing,
    /// Convolutions: `conv1d`, `conv2d`, `conv_transpose*`, `im2col`.
    Convolution,
    /// Creating, filling and freeing tensors: `empty`, `zeros`, `ones`, `full`, `arange`,
    /// `fill_`, Candle's `alloc`, `drop`.
    Allocation,
    /// A name the tables do not know (reported under its own name).
    Other,
}

impl OpClass {
    /// Every class, in declaration order.
    pub const ALL: [OpClass; 14] = [
        OpClass::Matmul,
        OpClass::Attention,
        OpClass::Softmax,
        OpClass::Norm,
        OpClass::Elementwise,
        OpClass::Reduction,
        OpClass::Rope,
        OpClass::Concat,
        OpClass::CopyLayout,
        OpClass::View,
        OpClass::Indexing,
        OpClass::Convolution,
        OpClass::Allocation,
        OpClass::Other,
    ];

    /// The class's stable snake_case name (as serialized): `matmul`, `copy_layout`.
    pub fn as_str(self) -> &'static str {
        match self {
            OpClass::Matmul => "matmul",
            OpClass::Attention => "attention",
            OpClass::Softmax => "softmax",
            OpClass::Norm => "norm",
            OpClass::Elementwise => "elementwise",
            OpClass::Reduction => "reduction",
            OpClass::Rope => "rope",
            OpClass::Concat => "concat",
            OpClass::CopyLayout => "copy_layout",
            OpClass::View => "view",
            OpClass::Indexing => "indexing",
            OpClass::Convolution => "convolution",
            OpClass::Allocation => "allocation",
            OpClass::Other => "other",
        }
    }

    /// The class for people: `matmul`, `copy / layout`, `embedding / indexing`.
    pub fn label(self) -> &'static str {
        match self {
            OpClass::Matmul => "matmul",
            OpClass::Attention => "attention",
            OpClass::Softmax => "softmax",
            OpClass::Norm => "norm",
            OpClass::Elementwise => "elementwise",
            OpClass::Reduction => "reduction",
            OpClass::Rope => "rope",
            OpClass::Concat => "concat",
            OpClass::CopyLayout => "copy / layout",
            OpClass::View => "view (no copy)",
            OpClass::Indexing => "embedding / indexing",
            OpClass::Convolution => "convolution",
            OpClass::Allocation => "allocation",
            OpClass::Other => "other",
        }
    }

    /// The class of a torch (ATen) op name as torch.profiler records it (`aten::addmm`).
    ///
    /// Tried in order, the first hit wins: the name in [`ATEN_OP_CLASSES`] without its
    /// namespace (`aten::`, or any one `ns::` such as `quantized::`); then without an
    /// overload (`.Tensor`); without an in-place `_` (`div_`); without an `_out` suffix;
    /// without one leading `_` (`_cat`); without a backward suffix (`_backward`,
    /// `_backward_data`, `_backward_input`, `_backward_weight`: the forward op's class); an
    /// autograd node (`MmBackward0`, `autograd::engine::evaluate_function: MmBackward0`) as
    /// its forward op in snake case (`mm`). Else [`OpClass::Other`].
    pub fn of_aten(name: &str) -> OpClass {
        let table = aten_map();
        let name = name.trim();
        // An autograd engine frame names its node after the colon.
        let name = name
            .strip_prefix("autograd::engine::evaluate_function:")
            .map_or(name, str::trim);
        let bare = strip_namespace(name);
        if let Some(class) = lookup_aten(table, bare) {
            return class;
        }
        // Autograd nodes: `AddmmBackward0` → `addmm`.
        if let Some(forward) = autograd_node_forward(bare)
            && let Some(class) = lookup_aten(table, &forward)
        {
            return class;
        }
        OpClass::Other
    }

    /// The class of a Candle op name: an op name as a capture records it (`matmul`,
    /// `softmax_last_dim`, `to_dtype`), or an op frame of the sampled op table
    /// (`Linear::forward`, `candle_nn::ops::rms_norm`, `matmul (backward)`,
    /// `apply_op1_no_bwd<candle_nn::ops::SoftmaxLastDim>`).
    ///
    /// Tried in order, the first hit wins: the name in [`CANDLE_OP_CLASSES`]; then without a
    /// ` (backward)` suffix, generic arguments (`<...>`, `::<...>`) and its path
    /// (`candle_nn::ops::`); a layer's method (`Linear::forward`, `KvCache::append`) by
    /// its type in [`CANDLE_LAYER_CLASSES`]; a function whose generic argument is a custom
    /// op's or layer's type (`apply_op1_no_bwd<...::SoftmaxLastDim>` → `softmax_last_dim`,
    /// `apply<candle_nn::linear::Linear>` → `Linear`). Else [`OpClass::Other`].
    pub fn of_candle(name: &str) -> OpClass {
        let ops = candle_map();
        let name = name.trim();
        if let Some(&class) = ops.get(name) {
            return class;
        }
        let name = name.strip_suffix("(backward)").map_or(name, str::trim_end);
        let parts = candle_parts(name);
        if let Some(&class) = ops.get(parts.function) {
            return class;
        }
        if parts.function.starts_with("forward")
            && let Some(class) = parts.owner.and_then(layer_class)
        {
            return class;
        }
        // The generic argument names the op (custom ops, `Tensor::apply` of a layer).
        if let Some(arg) = parts.generic {
            let ty = last_segment(arg);
            if let Some(class) = layer_class(ty) {
                return class;
            }
            if let Some(&class) = ops.get(camel_to_snake(ty).as_str()) {
                return class;
            }
        }
        OpClass::Other
    }
}

impl std::fmt::Display for OpClass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// Torch's ATen op names (without `aten::`) and their class, looked up by
/// [`OpClass::of_aten`] (which also strips overloads, in-place and `_out` suffixes).
pub const ATEN_OP_CLASSES: &[(&str, OpClass)] = &[
    // Matrix products.
    ("mm", OpClass::Matmul),
    ("addmm", OpClass::Matmul),
    ("_addmm_activation", OpClass::Matmul),
    ("bmm", OpClass::Matmul),
    ("baddbmm", OpClass::Matmul),
    ("addbmm", OpClass::Matmul),
    ("matmul", OpClass::Matmul),
    ("linear", OpClass::Matmul),
    ("mv", OpClass::Matmul),
    ("addmv", OpClass::Matmul),
    ("dot", OpClass::Matmul),
    ("vdot", OpClass::Matmul),
    ("outer", OpClass::Matmul),
    ("addr", OpClass::Matmul),
    ("einsum", OpClass::Matmul),
    ("tensordot", OpClass::Matmul),
    ("mkldnn_linear", OpClass::Matmul),
    ("_mkl_linear", OpClass::Matmul),
    ("_int_mm", OpClass::Matmul),
    ("_scaled_mm", OpClass::Matmul),
    ("_weight_int8pack_mm", OpClass::Matmul),
    ("_weight_int4pack_mm", OpClass::Matmul),
    // Fused attention.
    ("scaled_dot_product_attention", OpClass::Attention),
    ("_scaled_dot_product_attention_math", OpClass::Attention),
    ("_scaled_dot_product_flash_attention", OpClass::Attention),
    (
        "_scaled_dot_product_flash_attention_for_cpu",
        OpClass::Attention,
    ),
    (
        "_scaled_dot_product_efficient_attention",
        OpClass::Attention,
    ),
    ("_scaled_dot_product_cudnn_attention", OpClass::Attention),
    (
        "_scaled_dot_product_fused_attention_overrideable",
        OpClass::Attention,
    ),
    ("_flash_attention_forward", OpClass::Attention),
    ("_efficient_attention_forward", OpClass::Attention),
    ("_native_multi_head_attention", OpClass::Attention),
    ("multi_head_attention_forward", OpClass::Attention),
    ("flash_attn", OpClass::Attention),
    // Softmax.
    ("softmax", OpClass::Softmax),
    ("_softmax", OpClass::Softmax),
    ("_safe_softmax", OpClass::Softmax),
    ("log_softmax", OpClass::Softmax),
    ("_log_softmax", OpClass::Softmax),
    ("softmin", OpClass::Softmax),
    // Normalisations.
    ("layer_norm", OpClass::Norm),
    ("native_layer_norm", OpClass::Norm),
    ("rms_norm", OpClass::Norm),
    ("_fused_rms_norm", OpClass::Norm),
    ("group_norm", OpClass::Norm),
    ("native_group_norm", OpClass::Norm),
    ("batch_norm", OpClass::Norm),
    ("native_batch_norm", OpClass::Norm),
    ("_batch_norm_impl_index", OpClass::Norm),
    ("_native_batch_norm_legit", OpClass::Norm),
    ("_native_batch_norm_legit_no_training", OpClass::Norm),
    ("_batch_norm_with_update", OpClass::Norm),
    ("_batch_norm_no_update", OpClass::Norm),
    ("instance_norm", OpClass::Norm),
    ("local_response_norm", OpClass::Norm),
    // Element-wise math.
    ("add", OpClass::Elementwise),
    ("sub", OpClass::Elementwise),
    ("rsub", OpClass::Elementwise),
    ("mul", OpClass::Elementwise),
    ("div", OpClass::Elementwise),
    ("true_divide", OpClass::Elementwise),
    ("floor_divide", OpClass::Elementwise),
    ("remainder", OpClass::Elementwise),
    ("fmod", OpClass::Elementwise),
    ("neg", OpClass::Elementwise),
    ("abs", OpClass::Elementwise),
    ("sign", OpClass::Elementwise),
    ("exp", OpClass::Elementwise),
    ("exp2", OpClass::Elementwise),
    ("expm1", OpClass::Elementwise),
    ("log", OpClass::Elementwise),
    ("log2", OpClass::Elementwise),
    ("log10", OpClass::Elementwise),
    ("log1p", OpClass::Elementwise),
    ("sqrt", OpClass::Elementwise),
    ("rsqrt", OpClass::Elementwise),
    ("square", OpClass::Elementwise),
    ("reciprocal", OpClass::Elementwise),
    ("pow", OpClass::Elementwise),
    ("float_power", OpClass::Elementwise),
    ("sin", OpClass::Elementwise),
    ("cos", OpClass::Elementwise),
    ("tan", OpClass::Elementwise),
    ("atan2", OpClass::Elementwise),
    ("tanh", OpClass::Elementwise),
    ("sigmoid", OpClass::Elementwise),
    ("erf", OpClass::Elementwise),
    ("erfinv", OpClass::Elementwise),
    ("relu", OpClass::Elementwise),
    ("relu6", OpClass::Elementwise),
    ("leaky_relu", OpClass::Elementwise),
    ("prelu", OpClass::Elementwise),
    ("elu", OpClass::Elementwise),
    ("selu", OpClass::Elementwise),
    ("celu", OpClass::Elementwise),
    ("gelu", OpClass::Elementwise),
    ("silu", OpClass::Elementwise),
    ("mish", OpClass::Elementwise),
    ("softplus", OpClass::Elementwise),
    ("hardtanh", OpClass::Elementwise),
    ("hardswish", OpClass::Elementwise),
    ("hardsigmoid", OpClass::Elementwise),
    ("threshold", OpClass::Elementwise),
    ("glu", OpClass::Elementwise),
    ("clamp", OpClass::Elementwise),
    ("clamp_min", OpClass::Elementwise),
    ("clamp_max", OpClass::Elementwise),
    ("clip", OpClass::Elementwise),
    ("maximum", OpClass::Elementwise),
    ("minimum", OpClass::Elementwise),
    ("where", OpClass::Elementwise),
    ("masked_fill", OpClass::Elementwise),
    ("eq", OpClass::Elementwise),
    ("ne", OpClass::Elementwise),
    ("lt", OpClass::Elementwise),
    ("le", OpClass::Elementwise),
    ("gt", OpClass::Elementwise),
    ("ge", OpClass::Elementwise),
    ("isnan", OpClass::Elementwise),
    ("isinf", OpClass::Elementwise),
    ("isfinite", OpClass::Elementwise),
    ("logical_and", OpClass::Elementwise),
    ("logical_or", OpClass::Elementwise),
    ("logical_not", OpClass::Elementwise),
    ("logical_xor", OpClass::Elementwise),
    ("bitwise_and", OpClass::Elementwise),
    ("bitwise_or", OpClass::Elementwise),
    ("bitwise_not", OpClass::Elementwise),
    ("bitwise_xor", OpClass::Elementwise),
    ("floor", OpClass::Elementwise),
    ("ceil", OpClass::Elementwise),
    ("round", OpClass::Elementwise),
    ("trunc", OpClass::Elementwise),
    ("frac", OpClass::Elementwise),
    ("lerp", OpClass::Elementwise),
    ("addcmul", OpClass::Elementwise),
    ("addcdiv", OpClass::Elementwise),
    ("dropout", OpClass::Elementwise),
    ("native_dropout", OpClass::Elementwise),
    ("feature_dropout", OpClass::Elementwise),
    ("alpha_dropout", OpClass::Elementwise),
    ("tril", OpClass::Elementwise),
    ("triu", OpClass::Elementwise),
    ("nan_to_num", OpClass::Elementwise),
    // Reductions and selections along a dimension.
    ("sum", OpClass::Reduction),
    ("mean", OpClass::Reduction),
    ("prod", OpClass::Reduction),
    ("max", OpClass::Reduction),
    ("min", OpClass::Reduction),
    ("amax", OpClass::Reduction),
    ("amin", OpClass::Reduction),
    ("aminmax", OpClass::Reduction),
    ("argmax", OpClass::Reduction),
    ("argmin", OpClass::Reduction),
    ("var", OpClass::Reduction),
    ("var_mean", OpClass::Reduction),
    ("std", OpClass::Reduction),
    ("std_mean", OpClass::Reduction),
    ("norm", OpClass::Reduction),
    ("linalg_vector_norm", OpClass::Reduction),
    ("logsumexp", OpClass::Reduction),
    ("cumsum", OpClass::Reduction),
    ("cumprod", OpClass::Reduction),
    ("all", OpClass::Reduction),
    ("any", OpClass::Reduction),
    ("count_nonzero", OpClass::Reduction),
    ("topk", OpClass::Reduction),
    ("sort", OpClass::Reduction),
    ("argsort", OpClass::Reduction),
    ("multinomial", OpClass::Reduction),
    ("max_pool1d", OpClass::Reduction),
    ("max_pool2d", OpClass::Reduction),
    ("max_pool2d_with_indices", OpClass::Reduction),
    ("avg_pool1d", OpClass::Reduction),
    ("avg_pool2d", OpClass::Reduction),
    ("adaptive_avg_pool1d", OpClass::Reduction),
    ("adaptive_avg_pool2d", OpClass::Reduction),
    ("_adaptive_avg_pool2d", OpClass::Reduction),
    ("adaptive_max_pool2d", OpClass::Reduction),
    // Rotary embeddings (fused kernels; torch's eager rotary shows as mul/add/cat).
    ("rotary_embedding", OpClass::Rope),
    ("apply_rotary_emb", OpClass::Rope),
    ("apply_rotary_pos_emb", OpClass::Rope),
    // Concatenation.
    ("cat", OpClass::Concat),
    ("concat", OpClass::Concat),
    ("concatenate", OpClass::Concat),
    ("stack", OpClass::Concat),
    ("hstack", OpClass::Concat),
    ("vstack", OpClass::Concat),
    ("dstack", OpClass::Concat),
    // Copies and layout changes that move data.
    ("copy", OpClass::CopyLayout),
    ("contiguous", OpClass::CopyLayout),
    ("clone", OpClass::CopyLayout),
    ("to", OpClass::CopyLayout),
    ("_to_copy", OpClass::CopyLayout),
    ("_copy_from", OpClass::CopyLayout),
    ("_copy_from_and_resize", OpClass::CopyLayout),
    ("type_as", OpClass::CopyLayout),
    ("repeat", OpClass::CopyLayout),
    ("repeat_interleave", OpClass::CopyLayout),
    ("tile", OpClass::CopyLayout),
    ("flip", OpClass::CopyLayout),
    ("roll", OpClass::CopyLayout),
    ("pad", OpClass::CopyLayout),
    ("constant_pad_nd", OpClass::CopyLayout),
    ("reflection_pad1d", OpClass::CopyLayout),
    ("reflection_pad2d", OpClass::CopyLayout),
    ("replication_pad2d", OpClass::CopyLayout),
    ("upsample_nearest2d", OpClass::CopyLayout),
    ("upsample_bilinear2d", OpClass::CopyLayout),
    ("pixel_shuffle", OpClass::CopyLayout),
    ("item", OpClass::CopyLayout),
    ("_local_scalar_dense", OpClass::CopyLayout),
    ("cpu", OpClass::CopyLayout),
    ("cuda", OpClass::CopyLayout),
    // Views: no data moves.
    ("view", OpClass::View),
    ("_unsafe_view", OpClass::View),
    ("view_as", OpClass::View),
    ("reshape", OpClass::View),
    ("_reshape_alias", OpClass::View),
    ("reshape_as", OpClass::View),
    ("flatten", OpClass::View),
    ("unflatten", OpClass::View),
    ("transpose", OpClass::View),
    ("t", OpClass::View),
    ("permute", OpClass::View),
    ("movedim", OpClass::View),
    ("swapaxes", OpClass::View),
    ("swapdims", OpClass::View),
    ("numpy_T", OpClass::View),
    ("unsqueeze", OpClass::View),
    ("squeeze", OpClass::View),
    ("slice", OpClass::View),
    ("narrow", OpClass::View),
    ("select", OpClass::View),
    ("split", OpClass::View),
    ("split_with_sizes", OpClass::View),
    ("chunk", OpClass::View),
    ("unbind", OpClass::View),
    ("unfold", OpClass::View),
    ("diagonal", OpClass::View),
    ("expand", OpClass::View),
    ("expand_as", OpClass::View),
    ("broadcast_to", OpClass::View),
    ("as_strided", OpClass::View),
    ("alias", OpClass::View),
    ("detach", OpClass::View),
    ("lift_fresh", OpClass::View),
    ("resolve_conj", OpClass::View),
    ("resolve_neg", OpClass::View),
    ("view_as_real", OpClass::View),
    ("view_as_complex", OpClass::View),
    // Embedding lookups and indexing.
    ("embedding", OpClass::Indexing),
    ("embedding_bag", OpClass::Indexing),
    ("_embedding_bag", OpClass::Indexing),
    ("embedding_dense_backward", OpClass::Indexing),
    ("index_select", OpClass::Indexing),
    ("index", OpClass::Indexing),
    ("index_put", OpClass::Indexing),
    ("_index_put_impl", OpClass::Indexing),
    ("index_add", OpClass::Indexing),
    ("index_copy", OpClass::Indexing),
    ("index_fill", OpClass::Indexing),
    ("gather", OpClass::Indexing),
    ("scatter", OpClass::Indexing),
    ("scatter_add", OpClass::Indexing),
    ("scatter_reduce", OpClass::Indexing),
    ("masked_select", OpClass::Indexing),
    ("masked_scatter", OpClass::Indexing),
    ("take", OpClass::Indexing),
    ("take_along_dim", OpClass::Indexing),
    ("nonzero", OpClass::Indexing),
    ("one_hot", OpClass::Indexing),
    // Convolutions.
    ("conv1d", OpClass::Convolution),
    ("conv2d", OpClass::Convolution),
    ("conv3d", OpClass::Convolution),
    ("convolution", OpClass::Convolution),
    ("_convolution", OpClass::Convolution),
    ("conv_transpose1d", OpClass::Convolution),
    ("conv_transpose2d", OpClass::Convolution),
    ("conv_transpose3d", OpClass::Convolution),
    ("mkldnn_convolution", OpClass::Convolution),
    ("cudnn_convolution", OpClass::Convolution),
    ("cudnn_convolution_transpose", OpClass::Convolution),
    ("thnn_conv2d", OpClass::Convolution),
    ("_slow_conv2d_forward", OpClass::Convolution),
    ("slow_conv_transpose2d", OpClass::Convolution),
    ("slow_conv3d", OpClass::Convolution),
    ("_nnpack_spatial_convolution", OpClass::Convolution),
    ("_conv_depthwise2d", OpClass::Convolution),
    ("conv_depthwise3d", OpClass::Convolution),
    ("im2col", OpClass::Convolution),
    ("col2im", OpClass::Convolution),
    // Creating, filling and freeing tensors.
    ("empty", OpClass::Allocation),
    ("empty_like", OpClass::Allocation),
    ("empty_strided", OpClass::Allocation),
    ("new_empty", OpClass::Allocation),
    ("new_empty_strided", OpClass::Allocation),
    ("zeros", OpClass::Allocation),
    ("zeros_like", OpClass::Allocation),
    ("new_zeros", OpClass::Allocation),
    ("ones", OpClass::Allocation),
    ("ones_like", OpClass::Allocation),
    ("new_ones", OpClass::Allocation),
    ("full", OpClass::Allocation),
    ("full_like", OpClass::Allocation),
    ("new_full", OpClass::Allocation),
    ("arange", OpClass::Allocation),
    ("linspace", OpClass::Allocation),
    ("eye", OpClass::Allocation),
    ("rand", OpClass::Allocation),
    ("randn", OpClass::Allocation),
    ("rand_like", OpClass::Allocation),
    ("randn_like", OpClass::Allocation),
    ("randint", OpClass::Allocation),
    ("normal", OpClass::Allocation),
    ("uniform", OpClass::Allocation),
    ("bernoulli", OpClass::Allocation),
    ("scalar_tensor", OpClass::Allocation),
    ("tensor", OpClass::Allocation),
    ("fill", OpClass::Allocation),
    ("zero", OpClass::Allocation),
    ("resize", OpClass::Allocation),
    ("set", OpClass::Allocation),
    ("record_stream", OpClass::Allocation),
];

/// Candle's op names and their class, looked up by [`OpClass::of_candle`]: the names a
/// capture records (`matmul`, `to_dtype`), Candle's functions that the sampled op table shows
/// as ops (`Tensor::` methods, `candle_nn::ops`, `rotary_emb`) and its CPU kernels
/// (`copy_strided_src`, `copy2d`). A Candle `reshape` copies exactly when its input is not
/// contiguous and is otherwise nearly free, so time measured for it is a copy's.
pub const CANDLE_OP_CLASSES: &[(&str, OpClass)] = &[
    // Matrix products.
    ("matmul", OpClass::Matmul),
    ("broadcast_matmul", OpClass::Matmul),
    ("linear", OpClass::Matmul),
    ("gemm", OpClass::Matmul),
    ("qmatmul", OpClass::Matmul),
    // Fused attention.
    ("sdpa", OpClass::Attention),
    ("flash_attn", OpClass::Attention),
    ("flash_attn_varlen", OpClass::Attention),
    ("flash_attn_alibi", OpClass::Attention),
    ("scaled_dot_product_attention", OpClass::Attention),
    // Softmax.
    ("softmax", OpClass::Softmax),
    ("softmax_last_dim", OpClass::Softmax),
    ("log_softmax", OpClass::Softmax),
    // Normalisations.
    ("rms_norm", OpClass::Norm),
    ("rms_norm_slow", OpClass::Norm),
    ("layer_norm", OpClass::Norm),
    ("layer_norm_slow", OpClass::Norm),
    ("group_norm", OpClass::Norm),
    ("batch_norm", OpClass::Norm),
    // Element-wise math.
    ("add", OpClass::Elementwise),
    ("sub", OpClass::Elementwise),
    ("mul", OpClass::Elementwise),
    ("div", OpClass::Elementwise),
    ("maximum", OpClass::Elementwise),
    ("minimum", OpClass::Elementwise),
    ("broadcast_add", OpClass::Elementwise),
    ("broadcast_sub", OpClass::Elementwise),
    ("broadcast_mul", OpClass::Elementwise),
    ("broadcast_div", OpClass::Elementwise),
    ("broadcast_maximum", OpClass::Elementwise),
    ("broadcast_minimum", OpClass::Elementwise),
    ("broadcast_eq", OpClass::Elementwise),
    ("broadcast_ne", OpClass::Elementwise),
    ("broadcast_lt", OpClass::Elementwise),
    ("broadcast_le", OpClass::Elementwise),
    ("broadcast_gt", OpClass::Elementwise),
    ("broadcast_ge", OpClass::Elementwise),
    ("eq", OpClass::Elementwise),
    ("ne", OpClass::Elementwise),
    ("lt", OpClass::Elementwise),
    ("le", OpClass::Elementwise),
    ("gt", OpClass::Elementwise),
    ("ge", OpClass::Elementwise),
    ("cmp", OpClass::Elementwise),
    ("exp", OpClass::Elementwise),
    ("log", OpClass::Elementwise),
    ("sin", OpClass::Elementwise),
    ("cos", OpClass::Elementwise),
    ("tanh", OpClass::Elementwise),
    ("neg", OpClass::Elementwise),
    ("recip", OpClass::Elementwise),
    ("sqr", OpClass::Elementwise),
    ("sqrt", OpClass::Elementwise),
    ("abs", OpClass::Elementwise),
    ("ceil", OpClass::Elementwise),
    ("floor", OpClass::Elementwise),
    ("round", OpClass::Elementwise),
    ("round_to", OpClass::Elementwise),
    ("sign", OpClass::Elementwise),
    ("erf", OpClass::Elementwise),
    ("gelu", OpClass::Elementwise),
    ("gelu_erf", OpClass::Elementwise),
    ("relu", OpClass::Elementwise),
    ("leaky_relu", OpClass::Elementwise),
    ("elu", OpClass::Elementwise),
    ("silu", OpClass::Elementwise),
    ("swiglu", OpClass::Elementwise),
    ("sigmoid", OpClass::Elementwise),
    ("hard_sigmoid", OpClass::Elementwise),
    ("affine", OpClass::Elementwise),
    ("scale", OpClass::Elementwise),
    ("clamp", OpClass::Elementwise),
    ("powf", OpClass::Elementwise),
    ("pow", OpClass::Elementwise),
    ("where_cond", OpClass::Elementwise),
    ("dropout", OpClass::Elementwise),
    ("unary_impl", OpClass::Elementwise),
    ("binary_impl", OpClass::Elementwise),
    ("unary_map", OpClass::Elementwise),
    ("binary_map", OpClass::Elementwise),
    ("tril2", OpClass::Elementwise),
    ("triu2", OpClass::Elementwise),
    // Reductions and selections along a dimension.
    ("sum", OpClass::Reduction),
    ("sum_keepdim", OpClass::Reduction),
    ("sum_all", OpClass::Reduction),
    ("mean", OpClass::Reduction),
    ("mean_keepdim", OpClass::Reduction),
    ("mean_all", OpClass::Reduction),
    ("max", OpClass::Reduction),
    ("max_keepdim", OpClass::Reduction),
    ("max_all", OpClass::Reduction),
    ("min", OpClass::Reduction),
    ("min_keepdim", OpClass::Reduction),
    ("min_all", OpClass::Reduction),
    ("argmax", OpClass::Reduction),
    ("argmax_keepdim", OpClass::Reduction),
    ("argmin", OpClass::Reduction),
    ("argmin_keepdim", OpClass::Reduction),
    ("var", OpClass::Reduction),
    ("var_keepdim", OpClass::Reduction),
    ("cumsum", OpClass::Reduction),
    ("log_sum_exp", OpClass::Reduction),
    ("logsumexp", OpClass::Reduction),
    ("reduce_op", OpClass::Reduction),
    ("arg_sort_last_dim", OpClass::Reduction),
    ("sort_last_dim", OpClass::Reduction),
    ("avg_pool1d", OpClass::Reduction),
    ("avg_pool2d", OpClass::Reduction),
    ("max_pool1d", OpClass::Reduction),
    ("max_pool2d", OpClass::Reduction),
    // Rotary embeddings.
    ("rope", OpClass::Rope),
    ("rope_i", OpClass::Rope),
    ("rope_thd", OpClass::Rope),
    ("rope_slow", OpClass::Rope),
    ("rope_i_slow", OpClass::Rope),
    ("rope_thd_slow", OpClass::Rope),
    // Concatenation.
    ("cat", OpClass::Concat),
    ("cat0", OpClass::Concat),
    ("cat_contiguous", OpClass::Concat),
    ("stack", OpClass::Concat),
    ("append", OpClass::Concat),
    // Copies and layout changes that move data.
    ("copy_strided_src", OpClass::CopyLayout),
    ("copy2d", OpClass::CopyLayout),
    ("contiguous", OpClass::CopyLayout),
    ("force_contiguous", OpClass::CopyLayout),
    ("copy", OpClass::CopyLayout),
    ("to_dtype", OpClass::CopyLayout),
    ("to_device", OpClass::CopyLayout),
    ("to_vec1", OpClass::CopyLayout),
    ("to_vec2", OpClass::CopyLayout),
    ("to_vec3", OpClass::CopyLayout),
    ("to_scalar", OpClass::CopyLayout),
    ("reshape", OpClass::CopyLayout),
    ("pad_with_zeros", OpClass::CopyLayout),
    ("pad_with_same", OpClass::CopyLayout),
    ("repeat", OpClass::CopyLayout),
    ("upsample_nearest1d", OpClass::CopyLayout),
    ("upsample_nearest2d", OpClass::CopyLayout),
    ("slice_assign", OpClass::CopyLayout),
    ("slice_set", OpClass::CopyLayout),
    // Views: no data moves.
    ("narrow", OpClass::View),
    ("squeeze", OpClass::View),
    ("unsqueeze", OpClass::View),
    ("transpose", OpClass::View),
    ("t", OpClass::View),
    ("permute", OpClass::View),
    ("broadcast_as", OpClass::View),
    ("broadcast_left", OpClass::View),
    ("expand", OpClass::View),
    ("i", OpClass::View),
    ("chunk", OpClass::View),
    ("flatten", OpClass::View),
    ("flatten_all", OpClass::View),
    ("flatten_from", OpClass::View),
    ("flatten_to", OpClass::View),
    ("get", OpClass::View),
    ("get_on_dim", OpClass::View),
    ("detach", OpClass::View),
    // Embedding lookups and indexing.
    ("index_select", OpClass::Indexing),
    ("embedding", OpClass::Indexing),
    ("gather", OpClass::Indexing),
    ("scatter", OpClass::Indexing),
    ("scatter_add", OpClass::Indexing),
    ("scatter_set", OpClass::Indexing),
    ("index_add", OpClass::Indexing),
    ("index_add_", OpClass::Indexing),
    // Convolutions.
    ("conv1d", OpClass::Convolution),
    ("conv2d", OpClass::Convolution),
    ("conv_transpose1d", OpClass::Convolution),
    ("conv_transpose2d", OpClass::Convolution),
    ("im2col", OpClass::Convolution),
    ("im2col1d", OpClass::Convolution),
    ("col2im1d", OpClass::Convolution),
    // Creating, filling and freeing tensors.
    ("alloc", OpClass::Allocation),
    ("alloc_uninit", OpClass::Allocation),
    ("zeros", OpClass::Allocation),
    ("zeros_like", OpClass::Allocation),
    ("ones", OpClass::Allocation),
    ("ones_like", OpClass::Allocation),
    ("full", OpClass::Allocation),
    ("empty", OpClass::Allocation),
    ("new", OpClass::Allocation),
    ("from_vec", OpClass::Allocation),
    ("from_slice", OpClass::Allocation),
    ("arange", OpClass::Allocation),
    ("arange_step", OpClass::Allocation),
    ("eye", OpClass::Allocation),
    ("rand", OpClass::Allocation),
    ("randn", OpClass::Allocation),
    ("rand_like", OpClass::Allocation),
    ("randn_like", OpClass::Allocation),
    ("drop", OpClass::Allocation),
];

/// Candle layers (`candle_nn`, candle-transformers' `with_tracing` wrappers) whose methods
/// are ops of one class: `Linear::forward` is a matmul, `KvCache::append` a concatenation.
pub const CANDLE_LAYER_CLASSES: &[(&str, OpClass)] = &[
    ("Linear", OpClass::Matmul),
    ("QMatMul", OpClass::Matmul),
    ("QLinear", OpClass::Matmul),
    ("Softmax", OpClass::Softmax),
    ("SoftmaxLastDim", OpClass::Softmax),
    ("LayerNorm", OpClass::Norm),
    ("RmsNorm", OpClass::Norm),
    ("GroupNorm", OpClass::Norm),
    ("BatchNorm", OpClass::Norm),
    ("Activation", OpClass::Elementwise),
    ("Dropout", OpClass::Elementwise),
    ("RotaryEmbedding", OpClass::Rope),
    ("KvCache", OpClass::Concat),
    ("RotatingKvCache", OpClass::Concat),
    ("ConcatKvCache", OpClass::Concat),
    ("Embedding", OpClass::Indexing),
    ("Conv1d", OpClass::Convolution),
    ("Conv2d", OpClass::Convolution),
    ("ConvTranspose1d", OpClass::Convolution),
    ("ConvTranspose2d", OpClass::Convolution),
];

/// A table as a map, built once.
fn build(table: &'static [(&'static str, OpClass)]) -> FastMap<&'static str, OpClass> {
    let mut map = FastMap::default();
    for &(name, class) in table {
        map.entry(name).or_insert(class);
    }
    map
}

fn aten_map() -> &'static FastMap<&'static str, OpClass> {
    static MAP: OnceLock<FastMap<&'static str, OpClass>> = OnceLock::new();
    MAP.get_or_init(|| build(ATEN_OP_CLASSES))
}

fn candle_map() -> &'static FastMap<&'static str, OpClass> {
    static MAP: OnceLock<FastMap<&'static str, OpClass>> = OnceLock::new();
    MAP.get_or_init(|| build(CANDLE_OP_CLASSES))
}

fn layer_class(owner: &str) -> Option<OpClass> {
    static MAP: OnceLock<FastMap<&'static str, OpClass>> = OnceLock::new();
    MAP.get_or_init(|| build(CANDLE_LAYER_CLASSES))
        .get(owner)
        .copied()
}

/// `aten::mm` → `mm`; any one leading `ns::` (an identifier) goes, other names stay whole.
fn strip_namespace(name: &str) -> &str {
    match name.split_once("::") {
        Some((ns, rest))
            if !ns.is_empty()
                && ns.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                && !rest.is_empty() =>
        {
            rest
        }
        _ => name,
    }
}

/// The ATen rules of [`OpClass::of_aten`] after the namespace: exact, overload, in-place,
/// `_out`, leading `_`, backward suffixes.
fn lookup_aten(table: &FastMap<&'static str, OpClass>, name: &str) -> Option<OpClass> {
    let hit = |n: &str| table.get(n).copied();
    if let Some(c) = hit(name) {
        return Some(c);
    }
    // `add.Tensor` → `add`.
    let name = name.split_once('.').map_or(name, |(base, _)| base);
    let forms = |n: &str| -> Option<OpClass> {
        let inplace = n.strip_suffix('_').filter(|s| !s.is_empty());
        let out = n.strip_suffix("_out").filter(|s| !s.is_empty());
        hit(n)
            .or_else(|| inplace.and_then(hit))
            .or_else(|| out.and_then(hit))
            .or_else(|| {
                out.and_then(|o| o.strip_suffix('_'))
                    .filter(|s| !s.is_empty())
                    .and_then(hit)
            })
    };
    if let Some(c) = forms(name) {
        return Some(c);
    }
    if let Some(rest) = name.strip_prefix('_').filter(|s| !s.is_empty())
        && let Some(c) = forms(rest)
    {
        return Some(c);
    }
    for suffix in [
        "_backward_data",
        "_backward_input",
        "_backward_weight",
        "_backward",
    ] {
        if let Some(fwd) = name.strip_suffix(suffix).filter(|s| !s.is_empty())
            && let Some(c) = forms(fwd).or_else(|| {
                fwd.strip_prefix('_')
                    .filter(|s| !s.is_empty())
                    .and_then(forms)
            })
        {
            return Some(c);
        }
    }
    None
}

/// An autograd node's forward op: `AddmmBackward0` → `addmm`,
/// `NativeLayerNormBackward0` → `native_layer_norm`; `None` for other names.
fn autograd_node_forward(name: &str) -> Option<String> {
    let stem = name.trim_end_matches(|c: char| c.is_ascii_digit());
    let stem = stem.strip_suffix("Backward")?;
    if stem.is_empty() || !stem.starts_with(|c: char| c.is_ascii_uppercase()) {
        return None;
    }
    Some(camel_to_snake(stem))
}

/// `SoftmaxLastDim` → `softmax_last_dim` (also the sampled op table's name of a custom op).
pub(crate) fn camel_to_snake(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The byte index of the `<` that opens a generic argument list ending `name`, if `name` ends
/// with `>`.
fn trailing_generic(name: &str) -> Option<usize> {
    if !name.ends_with('>') {
        return None;
    }
    let mut depth = 0usize;
    for (i, b) in name.bytes().enumerate().rev() {
        match b {
            b'>' => depth += 1,
            b'<' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// A Candle frame's function, the type it belongs to and its generic argument.
struct CandleParts<'a> {
    function: &'a str,
    owner: Option<&'a str>,
    generic: Option<&'a str>,
}

/// The last `::` segment of a path, without generic arguments (`a::b::C<T>` → `C`).
fn last_segment(path: &str) -> &str {
    let path = path
        .split('<')
        .next()
        .unwrap_or(path)
        .trim_end_matches("::");
    path.rsplit("::").next().unwrap_or(path).trim()
}

/// Splits a Candle frame: `<candle_nn::linear::Linear as candle_core::Module>::forward`
/// (owner `Linear`, function `forward`), `candle_nn::ops::softmax_last_dim`,
/// `Tensor::narrow::<usize>`, `apply_op1_no_bwd<candle_nn::ops::SoftmaxLastDim>` (generic
/// argument `candle_nn::ops::SoftmaxLastDim`).
fn candle_parts(name: &str) -> CandleParts<'_> {
    if let Some(rest) = name.strip_prefix('<')
        && let Some((ty, tail)) = rest.split_once(" as ")
    {
        let function = tail.rsplit("::").next().unwrap_or(tail).trim();
        return CandleParts {
            function,
            owner: Some(last_segment(ty)).filter(|o| !o.is_empty()),
            generic: None,
        };
    }
    // A trailing generic argument: `f<A>`, `f::<A>` (matched bracket, scanned backwards).
    let (base, generic) = match trailing_generic(name) {
        Some(open) => (
            name[..open].trim_end_matches("::"),
            Some(&name[open + 1..name.len() - 1]),
        ),
        None => (name, None),
    };
    let mut segments = base.rsplit("::");
    let function = segments.next().unwrap_or(base).trim();
    let owner = segments
        .next()
        .map(|o| last_segment(o.trim_matches(|c| c == '<' || c == '>')))
        .filter(|o| !o.is_empty());
    CandleParts {
        function,
        owner,
        generic,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_have_no_duplicates_and_every_entry_maps_to_itself() {
        for (table, of) in [
            (ATEN_OP_CLASSES, OpClass::of_aten as fn(&str) -> OpClass),
            (CANDLE_OP_CLASSES, OpClass::of_candle as fn(&str) -> OpClass),
        ] {
            let mut seen = std::collections::HashSet::new();
            for &(name, class) in table {
                assert!(seen.insert(name), "{name} listed twice");
                assert_eq!(of(name), class, "{name}");
                assert_ne!(class, OpClass::Other, "{name}: Other is never listed");
            }
        }
        let mut seen = std::collections::HashSet::new();
        for &(owner, class) in CANDLE_LAYER_CLASSES {
            assert!(seen.insert(owner), "{owner} listed twice");
            assert_eq!(OpClass::of_candle(&format!("{owner}::forward")), class);
        }
    }

    #[test]
    fn names_and_labels() {
        for c in OpClass::ALL {
            let json = serde_json::to_string(&c).unwrap();
            assert_eq!(json, format!("\"{}\"", c.as_str()));
            assert!(!c.label().is_empty());
        }
        assert_eq!(OpClass::CopyLayout.as_str(), "copy_layout");
    }

    #[test]
    fn rules_of_the_aten_side() {
        for (name, class) in [
            ("aten::mm", OpClass::Matmul),
            ("aten::div_", OpClass::Elementwise),
            ("aten::add.Tensor", OpClass::Elementwise),
            ("aten::mm_out", OpClass::Matmul),
            ("aten::_cat", OpClass::Concat),
            ("aten::copy_", OpClass::CopyLayout),
            ("aten::fill_", OpClass::Allocation),
            ("detach_", OpClass::View),
            ("aten::native_layer_norm_backward", OpClass::Norm),
            ("aten::_softmax_backward_data", OpClass::Softmax),
            ("aten::convolution_backward", OpClass::Convolution),
            ("MmBackward0", OpClass::Matmul),
            ("NativeLayerNormBackward0", OpClass::Norm),
            (
                "autograd::engine::evaluate_function: AddmmBackward0",
                OpClass::Matmul,
            ),
            ("quantized::linear", OpClass::Matmul),
            ("aten::frobnicate", OpClass::Other),
            ("", OpClass::Other),
            ("aten::", OpClass::Other),
            ("_", OpClass::Other),
            ("Backward0", OpClass::Other),
            ("ProfilerStep#3", OpClass::Other),
        ] {
            assert_eq!(OpClass::of_aten(name), class, "{name}");
        }
    }

    #[test]
    fn rules_of_the_candle_side() {
        for (name, class) in [
            ("Linear::forward", OpClass::Matmul),
            (
                "<candle_nn::linear::Linear as candle_core::Module>::forward",
                OpClass::Matmul,
            ),
            ("candle_nn::ops::softmax_last_dim", OpClass::Softmax),
            ("candle_core::tensor::Tensor::matmul", OpClass::Matmul),
            (
                "candle_core::tensor::Tensor::narrow::<usize>",
                OpClass::View,
            ),
            ("cat<candle_core::tensor::Tensor>", OpClass::Concat),
            ("softmax<f32>", OpClass::Softmax),
            (
                "apply_op1_no_bwd<candle_nn::ops::SoftmaxLastDim>",
                OpClass::Softmax,
            ),
            ("apply<candle_nn::linear::Linear>", OpClass::Matmul),
            ("matmul (backward)", OpClass::Matmul),
            ("kv_cache::append", OpClass::Concat),
            (
                "candle_core::tensor_cat::<impl candle_core::tensor::Tensor>::cat",
                OpClass::Concat,
            ),
            ("KvCache::append", OpClass::Concat),
            ("RmsNorm::forward", OpClass::Norm),
            ("my_model::Block::forward", OpClass::Other),
            ("frobnicate", OpClass::Other),
            ("", OpClass::Other),
            ("<", OpClass::Other),
            ("<a as >::", OpClass::Other),
        ] {
            assert_eq!(OpClass::of_candle(name), class, "{name}");
        }
    }
}
