//! The BERT encoder's forward pass on the CPU, written for throughput: the weights of a
//! sentence-transformers BERT model, and token vectors for a pack of texts.
//!
//! It computes what `candle_transformers::models::bert::BertModel` computes (post-norm BERT,
//! absolute positions), laid out differently, because on a small CPU the time went elsewhere.
//! Candle only loads the weights; the pass itself runs on plain `f32` buffers, reused from pack
//! to pack (one set per thread):
//! - The four weight products of a layer, and the attention's two products, run on AMX tiles in
//!   bfloat16 (`kernels::amx`) where the CPU has them and the precision allows it
//!   (`Precision::Auto`); otherwise they run in float32 (`kernels::float32`, the `gemm` crate,
//!   with its AVX-512 kernels where the CPU has them, else AVX2/FMA, chosen at run time).
//! - Texts are packed, not padded: the rows of every projection are the real tokens of all the
//!   texts one after the other, and attention runs per text, so no padded token is ever
//!   computed and no attention mask is needed.
//! - Query, key and value are one product (their weights side by side). In float32 the heads
//!   are read as strided views of its output, so nothing is copied to split or transpose them;
//!   on the tiles they are rounded to bfloat16 once and packed per head.
//! - Bias, activation, residual and layer norm are applied to a product's output by the
//!   product itself (`Weights::times`'s `finish`); on the tiles a 32-row block at a time, while
//!   it is still in the cache. They and
//!   softmax are loops over plain slices written so the compiler vectorises them (lane-wise
//!   accumulators, a polynomial `exp` and `erf` instead of the scalar libm calls).
//!
//! A pack runs on one thread; the caller runs packs side by side, one per core (see
//! `local.rs`), which keeps every core busy through every part of the pass.

use candle_core::{Result, Tensor, bail};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{Config, HiddenAct};

use super::Precision;
use super::kernels::float32::{self, View, ViewMut};
use super::kernels::{self, amx};

/// The loaded encoder.
pub(crate) struct Encoder {
    /// The embedding tables, `[rows, hidden]` row-major: read a row at a time.
    word: Vec<f32>,
    position: Vec<f32>,
    token_type: Vec<f32>,
    norm: Norm,
    layers: Vec<Layer>,
    hidden: usize,
    heads: usize,
    act: HiddenAct,
    kernel: Kernel,
}

/// How the weight products are multiplied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kernel {
    /// AMX tiles, bfloat16 inputs, float32 sums.
    AmxBf16,
    /// Float32 products (the `gemm` crate).
    Float32,
}

impl Kernel {
    /// The kernel `precision` asks for on this CPU.
    pub(crate) fn choose(precision: Precision) -> Kernel {
        match precision {
            Precision::Auto if amx::available() => Kernel::AmxBf16,
            Precision::Auto | Precision::Float32 => Kernel::Float32,
        }
    }

    /// Tokens per pack (one forward pass on one thread), unless a single text is longer: enough
    /// rows for the products to run at full speed, few enough that a pack's activations stay
    /// near the core's caches and a call's packs outnumber the threads. Measured on both
    /// shared corpora (docs/BENCHMARKS.md): the tiles ran 15–40 % faster at 384 than at 2,048,
    /// the float32 products within 3 % from 384 to 2,048.
    pub(crate) fn pack_tokens(self) -> usize {
        match self {
            Kernel::AmxBf16 => 384,
            Kernel::Float32 => 1024,
        }
    }

    /// The name `describe` and `status` show.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kernel::AmxBf16 => "amx-bf16",
            Kernel::Float32 => "float32",
        }
    }
}

/// A weight matrix `[in, out]`, ready to be the right-hand side of a product.
enum Weights {
    /// Row-major, `inputs` rows of `outputs`.
    Float32 {
        values: Vec<f32>,
        inputs: usize,
        outputs: usize,
    },
    Tiles(amx::PackedWeights),
}

impl Weights {
    fn new(in_out: Tensor, kernel: Kernel) -> Result<Weights> {
        let (inputs, outputs) = in_out.dims2()?;
        let values = in_out.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
        Ok(match kernel {
            Kernel::Float32 => Weights::Float32 {
                values,
                inputs,
                outputs,
            },
            Kernel::AmxBf16 => Weights::Tiles(amx::PackedWeights::pack(&values, inputs, outputs)),
        })
    }

    /// `x` (`rows` rows of the weights' inputs) times the weights, into `out` (`rows` rows of
    /// their outputs), whose earlier values are dropped and whose memory is reused. `finish`
    /// is applied to the output's rows, `finish(rows, first)`: a block at a time as the tiles
    /// write them, all at once after a float32 product.
    fn times(
        &self,
        x: &[f32],
        rows: usize,
        out: &mut Vec<f32>,
        mut finish: impl FnMut(&mut [f32], usize),
    ) -> Result<()> {
        let inputs = match self {
            Weights::Float32 { inputs, .. } => *inputs,
            Weights::Tiles(weights) => weights.inputs(),
        };
        if x.len() != rows * inputs {
            bail!(
                "a product of {} values in {rows} rows with weights of {inputs} rows",
                x.len()
            );
        }
        match self {
            Weights::Float32 {
                values,
                inputs,
                outputs,
            } => {
                // Every value is written by the product; zeroing only grows the buffer.
                out.resize(rows * outputs, 0.0);
                float32::multiply(
                    View::rows(x, rows, *inputs),
                    View::rows(values, *inputs, *outputs),
                    ViewMut::rows(out, rows, *outputs),
                );
                finish(out, 0);
            }
            Weights::Tiles(weights) => amx::product_into(x, rows, weights, out, finish),
        }
        Ok(())
    }
}

/// One transformer layer. Weight matrices are `[in, out]`: the `[out, in]` tensors the file
/// holds, transposed.
struct Layer {
    /// Query, key and value weights side by side, `[hidden, 3 × hidden]`; the query's third
    /// (weights and bias) is scaled by `1/√head_dim` here, once, instead of every score.
    qkv: Weights,
    qkv_bias: Vec<f32>,
    attention_out: Weights,
    attention_out_bias: Vec<f32>,
    attention_norm: Norm,
    intermediate: Weights,
    intermediate_bias: Vec<f32>,
    output: Weights,
    output_bias: Vec<f32>,
    output_norm: Norm,
}

/// A layer norm's scale and shift.
struct Norm {
    weight: Vec<f32>,
    bias: Vec<f32>,
    eps: f32,
}

/// A pack's token vectors: `[tokens, hidden]` row-major, the texts' rows one after the other,
/// and each text's first row and row count.
pub(crate) struct Hidden {
    pub values: Vec<f32>,
    pub spans: Vec<(usize, usize)>,
}

impl Encoder {
    /// The weights under `vb`, with or without the model type's prefix (`bert.`), as candle's
    /// `BertModel::load` finds them.
    pub fn load(vb: VarBuilder, config: &Config, precision: Precision) -> Result<Encoder> {
        let kernel = Kernel::choose(precision);
        let vb = match config.model_type.as_deref() {
            Some(prefix)
                if !vb.contains_tensor("embeddings.word_embeddings.weight")
                    && vb.contains_tensor(&format!(
                        "{prefix}.embeddings.word_embeddings.weight"
                    )) =>
            {
                vb.pp(prefix)
            }
            _ => vb,
        };
        let hidden = config.hidden_size;
        let heads = config.num_attention_heads;
        if heads == 0 || !hidden.is_multiple_of(heads) {
            bail!("a hidden size of {hidden} does not split into {heads} attention heads");
        }
        let eps = config.layer_norm_eps as f32;
        let embeddings = vb.pp("embeddings");
        let table = |rows: usize, name: &str| -> Result<Vec<f32>> {
            embeddings
                .get((rows, hidden), name)?
                .flatten_all()?
                .to_vec1()
        };
        let word = table(config.vocab_size, "word_embeddings.weight")?;
        let position = table(config.max_position_embeddings, "position_embeddings.weight")?;
        let token_type = table(config.type_vocab_size, "token_type_embeddings.weight")?;
        let norm = Norm::load(embeddings.pp("LayerNorm"), hidden, eps)?;
        let scale = 1.0 / ((hidden / heads) as f64).sqrt();
        let layers = (0..config.num_hidden_layers)
            .map(|index| {
                let vb = vb.pp(format!("encoder.layer.{index}"));
                let attention = vb.pp("attention");
                let (query, query_bias) = linear(attention.pp("self.query"), hidden, hidden)?;
                let (key, key_bias) = linear(attention.pp("self.key"), hidden, hidden)?;
                let (value, value_bias) = linear(attention.pp("self.value"), hidden, hidden)?;
                let qkv = Tensor::cat(&[(query * scale)?, key, value], 0)?;
                let qkv_bias = Tensor::cat(&[(query_bias * scale)?, key_bias, value_bias], 0)?;
                let (attention_out, attention_out_bias) =
                    linear(attention.pp("output.dense"), hidden, hidden)?;
                let (intermediate, intermediate_bias) = linear(
                    vb.pp("intermediate.dense"),
                    hidden,
                    config.intermediate_size,
                )?;
                let (output, output_bias) =
                    linear(vb.pp("output.dense"), config.intermediate_size, hidden)?;
                Ok(Layer {
                    qkv: Weights::new(qkv.t()?, kernel)?,
                    qkv_bias: qkv_bias.to_vec1()?,
                    attention_out: Weights::new(attention_out.t()?, kernel)?,
                    attention_out_bias: attention_out_bias.to_vec1()?,
                    attention_norm: Norm::load(attention.pp("output.LayerNorm"), hidden, eps)?,
                    intermediate: Weights::new(intermediate.t()?, kernel)?,
                    intermediate_bias: intermediate_bias.to_vec1()?,
                    output: Weights::new(output.t()?, kernel)?,
                    output_bias: output_bias.to_vec1()?,
                    output_norm: Norm::load(vb.pp("output.LayerNorm"), hidden, eps)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Encoder {
            word,
            position,
            token_type,
            norm,
            layers,
            hidden,
            heads,
            act: config.hidden_act,
            kernel,
        })
    }

    /// How the weight products are multiplied.
    pub(crate) fn kernel(&self) -> Kernel {
        self.kernel
    }

    /// Token vectors of the texts (each its token ids and token type ids), packed.
    pub fn forward(&self, texts: &[(&[u32], &[u32])]) -> Result<Hidden> {
        let hidden = self.hidden;
        let mut spans = Vec::with_capacity(texts.len());
        let mut tokens = 0;
        for (ids, types) in texts {
            if ids.len() != types.len() {
                bail!(
                    "a text of {} tokens has {} token types",
                    ids.len(),
                    types.len()
                );
            }
            spans.push((tokens, ids.len()));
            tokens += ids.len();
        }
        fn row(table: &[f32], index: usize, hidden: usize) -> Result<&[f32]> {
            match table.get(index * hidden..(index + 1) * hidden) {
                Some(row) => Ok(row),
                None => bail!("token, position or type {index} is outside the model's tables"),
            }
        }
        let mut x = vec![0f32; tokens * hidden];
        let mut rows = x.chunks_exact_mut(hidden);
        for (ids, types) in texts {
            for (at, (&id, &kind)) in ids.iter().zip(types.iter()).enumerate() {
                let Some(out) = rows.next() else {
                    bail!("fewer rows than tokens")
                };
                let word = row(&self.word, id as usize, hidden)?;
                let position = row(&self.position, at, hidden)?;
                let kind = row(&self.token_type, kind as usize, hidden)?;
                for (((out, w), p), t) in out.iter_mut().zip(word).zip(position).zip(kind) {
                    *out = w + p + t;
                }
                self.norm.apply(out);
            }
        }
        let x = BUFFERS.with_borrow_mut(|buffers| -> Result<Vec<f32>> {
            for layer in &self.layers {
                self.layer(layer, &mut x, &spans, buffers)?;
            }
            buffers.trim();
            Ok(x)
        })?;
        Ok(Hidden { values: x, spans })
    }

    /// One post-norm transformer layer over the packed rows `x`, which it replaces with its
    /// output; `buffers` hold the steps between.
    fn layer(
        &self,
        layer: &Layer,
        x: &mut Vec<f32>,
        spans: &[(usize, usize)],
        buffers: &mut Buffers,
    ) -> Result<()> {
        let rows = x.len() / self.hidden;
        let Buffers {
            qkv,
            context,
            scores,
            attended,
            inner,
            out,
        } = buffers;
        let hidden = self.hidden;
        layer.qkv.times(x, rows, qkv, |values, _| {
            vectorized(Bias {
                values,
                bias: &layer.qkv_bias,
                act: None,
            });
        })?;
        self.attention(qkv, spans, context, scores)?;

        layer
            .attention_out
            .times(context, rows, attended, |values, first| {
                vectorized(NormRows {
                    norm: &layer.attention_norm,
                    values,
                    bias: &layer.attention_out_bias,
                    residual: &x[first * hidden..],
                });
            })?;

        layer
            .intermediate
            .times(attended, rows, inner, |values, _| {
                vectorized(Bias {
                    values,
                    bias: &layer.intermediate_bias,
                    act: Some(self.act),
                });
            })?;

        layer.output.times(inner, rows, out, |values, first| {
            vectorized(NormRows {
                norm: &layer.output_norm,
                values,
                bias: &layer.output_bias,
                residual: &attended[first * hidden..],
            });
        })?;
        std::mem::swap(x, out);
        Ok(())
    }

    /// Self-attention of each text over its own rows of `qkv` (`[tokens, 3 × hidden]`, biased,
    /// the query pre-scaled): the heads' context vectors side by side, `[tokens, hidden]`, into
    /// `context`.
    fn attention(
        &self,
        qkv: &[f32],
        spans: &[(usize, usize)],
        context: &mut Vec<f32>,
        scores: &mut Vec<f32>,
    ) -> Result<()> {
        let (hidden, heads) = (self.hidden, self.heads);
        let width = hidden / heads;
        let tokens = qkv.len() / (3 * hidden);
        context.clear();
        context.resize(tokens * hidden, 0.0);
        if self.kernel == Kernel::AmxBf16 {
            for &(start, len) in spans {
                amx::attention(
                    &qkv[start * 3 * hidden..][..len * 3 * hidden],
                    len,
                    heads,
                    width,
                    |scores, len, stride| {
                        vectorized(Softmax {
                            values: scores,
                            len,
                            stride,
                        });
                    },
                    &mut context[start * hidden..][..len * hidden],
                );
            }
            return Ok(());
        }
        let longest = spans.iter().map(|&(_, len)| len).max().unwrap_or(0);
        scores.resize(scores.len().max(longest * longest), 0.0);
        for &(start, len) in spans {
            let scores = &mut scores[..len * len];
            // Each head's query, key and value are `len × width` views of the text's rows, as
            // they lie (`[len, 3, heads, width]`); its context goes straight into its columns
            // of the output's rows.
            let text = &qkv[start * 3 * hidden..][..len * 3 * hidden];
            let part = |index: usize, head: usize| View {
                values: &text[index * hidden + head * width..],
                rows: len,
                columns: width,
                row_stride: 3 * hidden,
                column_stride: 1,
            };
            for head in 0..heads {
                float32::multiply(
                    part(0, head),
                    part(1, head).transposed(),
                    ViewMut::rows(scores, len, len),
                );
                vectorized(Softmax {
                    values: scores,
                    len,
                    stride: len,
                });
                float32::multiply(
                    View::rows(scores, len, len),
                    part(2, head),
                    ViewMut {
                        values: &mut context[start * hidden + head * width..],
                        rows: len,
                        columns: width,
                        row_stride: hidden,
                        column_stride: 1,
                    },
                );
            }
        }
        Ok(())
    }
}

/// The values between a layer's steps, `[tokens, width]` row-major each; kept per thread and
/// written over, pack after pack, so a forward pass allocates (and the kernel zeroes fresh
/// pages for) nothing but its input, but for a buffer past `kernels::KEPT_BYTES`, which is
/// freed at the end of the pass.
#[derive(Default)]
struct Buffers {
    /// Query, key and value, `3 × hidden` wide.
    qkv: Vec<f32>,
    /// The heads' context vectors.
    context: Vec<f32>,
    /// One text's attention scores, one head at a time (float32 only: the tiles keep their own).
    scores: Vec<f32>,
    /// The attention's output, normalised: the residual of the feed-forward part.
    attended: Vec<f32>,
    /// The feed-forward part's intermediate activations.
    inner: Vec<f32>,
    /// The layer's output, swapped with its input.
    out: Vec<f32>,
}

impl Buffers {
    /// Frees what one long pack grew past [`kernels::KEPT_BYTES`].
    fn trim(&mut self) {
        let Buffers {
            qkv,
            context,
            scores,
            attended,
            inner,
            out,
        } = self;
        for buffer in [qkv, context, scores, attended, inner, out] {
            kernels::release_if_large(buffer);
        }
    }
}

thread_local! {
    static BUFFERS: std::cell::RefCell<Buffers> = std::cell::RefCell::new(Buffers::default());
}

/// A fused loop over a product's output, run by [`vectorized`].
trait Fused {
    fn run(self);
}

/// Runs `op` compiled for the best instruction set this CPU has of those `pulp` knows
/// (AVX-512, AVX2/FMA, baseline x86-64), chosen at run time. Every function `run` calls is
/// `inline(always)`, so the loops are vectorised inside the chosen one.
fn vectorized<Op: Fused>(op: Op) {
    struct Dispatch<Op>(Op);
    impl<Op: Fused> pulp::WithSimd for Dispatch<Op> {
        type Output = ();
        #[inline(always)]
        fn with_simd<S: pulp::Simd>(self, _: S) {
            self.0.run();
        }
    }
    pulp::Arch::new().dispatch(Dispatch(op));
}

/// Adds the bias to every row, then applies the activation, if any.
struct Bias<'a> {
    values: &'a mut [f32],
    bias: &'a [f32],
    act: Option<HiddenAct>,
}

impl Fused for Bias<'_> {
    #[inline(always)]
    fn run(self) {
        add_rows(self.values, self.bias);
        if let Some(act) = self.act {
            activate(self.values, act);
        }
    }
}

/// Bias, residual and layer norm over every row.
struct NormRows<'a> {
    norm: &'a Norm,
    values: &'a mut [f32],
    bias: &'a [f32],
    residual: &'a [f32],
}

impl Fused for NormRows<'_> {
    #[inline(always)]
    fn run(self) {
        self.norm.apply_rows(self.values, self.bias, self.residual);
    }
}

/// Softmax over every row of `len` scores; the rows lie `stride` values apart, and what lies
/// between is left as it is.
struct Softmax<'a> {
    values: &'a mut [f32],
    len: usize,
    stride: usize,
}

impl Fused for Softmax<'_> {
    #[inline(always)]
    fn run(self) {
        for row in self.values.chunks_mut(self.stride) {
            softmax(&mut row[..self.len]);
        }
    }
}

impl Norm {
    fn load(vb: VarBuilder, size: usize, eps: f32) -> Result<Norm> {
        Ok(Norm {
            weight: vb.get(size, "weight")?.to_vec1()?,
            bias: vb.get(size, "bias")?.to_vec1()?,
            eps,
        })
    }

    /// Each row of `values` becomes `norm(row + bias + residual's row)`.
    #[inline(always)]
    fn apply_rows(&self, values: &mut [f32], bias: &[f32], residual: &[f32]) {
        let size = self.weight.len();
        for (row, residual) in values
            .chunks_exact_mut(size)
            .zip(residual.chunks_exact(size))
        {
            for ((value, bias), residual) in row.iter_mut().zip(bias).zip(residual) {
                *value += bias + residual;
            }
            self.apply(row);
        }
    }

    /// Layer norm of one row, in place (the variance is the biased one, as PyTorch's).
    #[inline(always)]
    fn apply(&self, row: &mut [f32]) {
        let n = row.len() as f32;
        let mean = sum(row) / n;
        let mut squares = [0f32; LANES];
        let mut chunks = row.chunks_exact(LANES);
        for chunk in &mut chunks {
            for (square, &value) in squares.iter_mut().zip(chunk) {
                let centred = value - mean;
                *square += centred * centred;
            }
        }
        let tail = chunks
            .remainder()
            .iter()
            .map(|&value| (value - mean) * (value - mean))
            .sum::<f32>();
        let variance = (squares.iter().sum::<f32>() + tail) / n;
        let inverse = 1.0 / (variance + self.eps).sqrt();
        for ((value, weight), bias) in row.iter_mut().zip(&self.weight).zip(&self.bias) {
            *value = (*value - mean) * inverse * weight + bias;
        }
    }
}

/// Accumulators per reduction: enough independent sums for the compiler to keep them in one
/// or two vector registers (a single running sum is a chain it may not reorder).
const LANES: usize = 8;

#[inline(always)]
fn sum(values: &[f32]) -> f32 {
    let mut sums = [0f32; LANES];
    let mut chunks = values.chunks_exact(LANES);
    for chunk in &mut chunks {
        for (sum, &value) in sums.iter_mut().zip(chunk) {
            *sum += value;
        }
    }
    sums.iter().sum::<f32>() + chunks.remainder().iter().sum::<f32>()
}

#[inline(always)]
fn max(values: &[f32]) -> f32 {
    let mut maxima = [f32::NEG_INFINITY; LANES];
    let mut chunks = values.chunks_exact(LANES);
    for chunk in &mut chunks {
        for (max, &value) in maxima.iter_mut().zip(chunk) {
            *max = if value > *max { value } else { *max };
        }
    }
    chunks
        .remainder()
        .iter()
        .chain(&maxima)
        .fold(f32::NEG_INFINITY, |max, &value| max.max(value))
}

/// A row of attention scores to probabilities.
#[inline(always)]
fn softmax(row: &mut [f32]) {
    let top = max(row);
    for value in row.iter_mut() {
        *value = exp(*value - top);
    }
    let scale = 1.0 / sum(row);
    for value in row.iter_mut() {
        *value *= scale;
    }
}

/// `bias` added to every row of `values`.
#[inline(always)]
fn add_rows(values: &mut [f32], bias: &[f32]) {
    for row in values.chunks_exact_mut(bias.len()) {
        for (value, bias) in row.iter_mut().zip(bias) {
            *value += bias;
        }
    }
}

#[inline(always)]
fn activate(values: &mut [f32], act: HiddenAct) {
    match act {
        HiddenAct::Gelu => {
            for value in values.iter_mut() {
                *value = 0.5 * *value * (1.0 + erf(*value * std::f32::consts::FRAC_1_SQRT_2));
            }
        }
        HiddenAct::GeluApproximate => {
            // tanh(u) = 1 - 2 / (exp(2u) + 1), with u clamped where tanh is ±1 in f32.
            for value in values.iter_mut() {
                let x = *value;
                let u = (0.797_884_6 * (x + 0.044_715 * x * x * x)).clamp(-9.0, 9.0);
                let tanh = 1.0 - 2.0 / (exp(2.0 * u) + 1.0);
                *value = 0.5 * x * (1.0 + tanh);
            }
        }
        HiddenAct::Relu => {
            for value in values.iter_mut() {
                *value = value.max(0.0);
            }
        }
    }
}

/// `e^x` for `x <= 0` (and moderately above), branch-free so a loop of it vectorises: `x` is
/// split into `n·ln2 + r` with `|r| <= ln2/2`, `e^r` is a degree-6 polynomial (relative error
/// about 2e-7, an ulp or two) and `2^n` is built in the exponent bits. Below -87 it returns
/// about 1.6e-38 instead of a denormal or 0, which no softmax or tanh can tell apart.
#[inline(always)]
fn exp(x: f32) -> f32 {
    // Adding 1.5·2^23 rounds to an integer (round to nearest) and leaves that integer in the
    // low mantissa bits, with no float-to-int conversion (which SSE2 vectorises badly).
    const SHIFT: f32 = 12_582_912.0;
    let x = x.clamp(-87.0, 88.0);
    let shifted = x * std::f32::consts::LOG2_E + SHIFT;
    let n = shifted - SHIFT;
    // ln 2 in two parts (Cephes's): the first has so few bits that `n` times it is exact.
    let r = x - n * 0.693_359_4 + n * 2.121_944_4e-4;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (0.166_666_67
                    + r * (0.041_666_668 + r * (0.008_333_334 + r * 0.001_388_888_9)))));
    let power = (shifted.to_bits().wrapping_sub(SHIFT.to_bits()) as i32 + 127) as u32;
    p * f32::from_bits(power << 23)
}

/// The error function, as a rational approximation in x² (Eigen's and XLA's float `erf`: a few
/// ulp from the true value on [-4, 4], where beyond it erf is ±1 in f32), branch-free.
#[inline(always)]
fn erf(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let p = x2 * -2.726_142_4e-10 + 2.770_681_5e-8;
    let p = x2 * p + -2.101_024e-6;
    let p = x2 * p + -5.692_506_6e-5;
    let p = x2 * p + -7.349_906_4e-4;
    let p = x2 * p + -2.954_600_6e-3;
    let p = x2 * p + -1.609_603_3e-2;
    let q = x2 * -1.456_607_2e-5 + -2.133_740_6e-4;
    let q = x2 * q + -1.682_827e-3;
    let q = x2 * q + -7.373_329_3e-3;
    let q = x2 * q + -1.426_474e-2;
    x * p / q
}

/// The `[out, in]` weight and the bias of a linear layer.
fn linear(vb: VarBuilder, inputs: usize, outputs: usize) -> Result<(Tensor, Tensor)> {
    Ok((
        vb.get((outputs, inputs), "weight")?,
        vb.get(outputs, "bias")?,
    ))
}

#[cfg(test)]
mod tests {
    use super::{erf, exp};

    #[test]
    fn exp_and_erf_are_within_a_few_ulp() {
        let mut x = -80.0f32;
        while x <= 80.0 {
            let (ours, std) = (exp(x), x.exp());
            assert!(
                ((ours - std) / std).abs() < 1e-6,
                "exp({x}): {ours} vs {std}"
            );
            x += 0.003_7;
        }
        let mut x = -6.0f32;
        while x <= 6.0 {
            let std = libm_erf(f64::from(x)) as f32;
            assert!((erf(x) - std).abs() < 1e-6, "erf({x}): {} vs {std}", erf(x));
            x += 0.000_7;
        }
    }

    /// erf by its Taylor series in f64 (its cancellation costs under 1e-9 for |x| <= 4; beyond,
    /// erf is ±1 within 2e-8).
    fn libm_erf(x: f64) -> f64 {
        if x.abs() > 4.0 {
            return x.signum();
        }
        let mut term = x;
        let mut total = x;
        for n in 1..200 {
            term *= -x * x / n as f64;
            total += term / (2 * n + 1) as f64;
        }
        total * 2.0 / std::f64::consts::PI.sqrt()
    }
}
