//! The BERT encoder's forward pass on the CPU, written for throughput: the weights of a
//! sentence-transformers BERT model, and token vectors for a pack of texts.
//!
//! It computes what `candle_transformers::models::bert::BertModel` computes (post-norm BERT,
//! absolute positions), laid out differently, because on a small CPU the time went elsewhere:
//! - The four weight products of a layer run on AMX tiles in bfloat16 (`amx.rs`) where the CPU
//!   has them and the precision allows it (`Precision::Auto`); otherwise, and for the
//!   attention's own products, candle multiplies in float32 (the `gemm` crate, with its
//!   AVX-512 kernels where the CPU has them, else AVX2/FMA, chosen at run time).
//! - Texts are packed, not padded: the rows of every projection are the real tokens of all the
//!   texts one after the other, and attention runs per text, so no padded token is ever
//!   computed and no attention mask is needed.
//! - Query, key and value are one product (their weights side by side), and the heads are read
//!   as strided views of its output, so nothing is copied to split or transpose them.
//! - Bias, activation, residual, layer norm and softmax are fused loops over plain slices,
//!   written so the compiler vectorises them (lane-wise accumulators, a polynomial `exp` and
//!   `erf` instead of the scalar libm calls), where candle makes one pass and one buffer per
//!   operation, single-threaded.
//!
//! A pack runs on one thread; the caller runs packs side by side, one per core (see
//! `local.rs`), which keeps every core busy through the parts candle does not parallelise.

use candle_core::{Device, IndexOp, Result, Storage, Tensor, bail};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{Config, HiddenAct};

use super::Precision;
use super::amx;

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
    /// candle's float32 products.
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
    Float32(Tensor),
    Tiles(amx::PackedWeights),
}

impl Weights {
    fn new(in_out: Tensor, kernel: Kernel) -> Result<Weights> {
        match kernel {
            Kernel::Float32 => Ok(Weights::Float32(in_out)),
            Kernel::AmxBf16 => {
                let (inputs, outputs) = in_out.dims2()?;
                let values = in_out.contiguous()?.flatten_all()?.to_vec1::<f32>()?;
                Ok(Weights::Tiles(amx::PackedWeights::pack(
                    &values, inputs, outputs,
                )))
            }
        }
    }

    /// `x` (`[rows, in]`) times the weights: `[rows, out]`.
    fn times(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Weights::Float32(weights) => x.matmul(weights),
            Weights::Tiles(weights) => {
                let (rows, inputs) = x.dims2()?;
                if inputs != weights.inputs() {
                    bail!(
                        "a product of {inputs} columns with weights of {} rows",
                        weights.inputs()
                    );
                }
                let out = read(x, |values| Ok(amx::product(values, rows, weights)))?;
                Tensor::from_vec(out, (rows, weights.outputs()), &Device::Cpu)
            }
        }
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
        for (ids, _) in texts {
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
        let mut x = Tensor::from_vec(x, (tokens, hidden), &Device::Cpu)?;
        for layer in &self.layers {
            x = self.layer(layer, &x, &spans)?;
        }
        Ok(Hidden {
            values: x.flatten_all()?.to_vec1()?,
            spans,
        })
    }

    /// One post-norm transformer layer over the packed rows `x`.
    fn layer(&self, layer: &Layer, x: &Tensor, spans: &[(usize, usize)]) -> Result<Tensor> {
        let qkv = layer.qkv.times(x)?;
        in_place(&qkv, |values| {
            vectorized(Bias {
                values,
                bias: &layer.qkv_bias,
                act: None,
            });
            Ok(())
        })?;
        let context = self.attention(&qkv, spans)?;

        let attended = layer.attention_out.times(&context)?;
        read(x, |residual| {
            in_place(&attended, |values| {
                vectorized(NormRows {
                    norm: &layer.attention_norm,
                    values,
                    bias: &layer.attention_out_bias,
                    residual,
                });
                Ok(())
            })
        })?;

        let inner = layer.intermediate.times(&attended)?;
        in_place(&inner, |values| {
            vectorized(Bias {
                values,
                bias: &layer.intermediate_bias,
                act: Some(self.act),
            });
            Ok(())
        })?;

        let out = layer.output.times(&inner)?;
        read(&attended, |residual| {
            in_place(&out, |values| {
                vectorized(NormRows {
                    norm: &layer.output_norm,
                    values,
                    bias: &layer.output_bias,
                    residual,
                });
                Ok(())
            })
        })?;
        Ok(out)
    }

    /// Self-attention of each text over its own rows of `qkv` (`[tokens, 3 × hidden]`, biased,
    /// the query pre-scaled): the heads' context vectors side by side, `[tokens, hidden]`.
    fn attention(&self, qkv: &Tensor, spans: &[(usize, usize)]) -> Result<Tensor> {
        let (hidden, heads) = (self.hidden, self.heads);
        let width = hidden / heads;
        let tokens = qkv.dim(0)?;
        let mut context = vec![0f32; tokens * hidden];
        for &(start, len) in spans {
            // `[len, 3, heads, width]` is how the rows already lie; each of q, k, v is then a
            // strided `[heads, len, width]` view, which the products read without a copy.
            let rows = qkv.narrow(0, start, len)?.reshape((len, 3, heads, width))?;
            let part = |index: usize| rows.i((.., index))?.transpose(0, 1);
            let (query, key, value) = (part(0)?, part(1)?, part(2)?);
            let scores = query.matmul(&key.t()?)?;
            in_place(&scores, |values| {
                vectorized(Softmax { values, len });
                Ok(())
            })?;
            let heads_context = scores.matmul(&value)?;
            read(&heads_context, |values| {
                // `[heads, len, width]` to the rows' `[len, heads × width]`.
                for (head, block) in values.chunks_exact(len * width).enumerate() {
                    for (at, vector) in block.chunks_exact(width).enumerate() {
                        let to = (start + at) * hidden + head * width;
                        context[to..to + width].copy_from_slice(vector);
                    }
                }
                Ok(())
            })?;
        }
        Tensor::from_vec(context, (tokens, hidden), &Device::Cpu)
    }
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

/// Softmax over every row of `len` scores.
struct Softmax<'a> {
    values: &'a mut [f32],
    len: usize,
}

impl Fused for Softmax<'_> {
    #[inline(always)]
    fn run(self) {
        for row in self.values.chunks_exact_mut(self.len) {
            softmax(row);
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

/// Runs `f` on a contiguous f32 CPU tensor's values.
fn read<R>(tensor: &Tensor, f: impl FnOnce(&[f32]) -> Result<R>) -> Result<R> {
    let (storage, layout) = tensor.storage_and_layout();
    let Storage::Cpu(storage) = &*storage else {
        bail!("the encoder runs on the CPU")
    };
    let Some((start, end)) = layout.contiguous_offsets() else {
        bail!("the encoder reads contiguous tensors only")
    };
    f(&storage.as_slice::<f32>()?[start..end])
}

/// Runs `f` on a contiguous f32 CPU tensor's values, which it may change: the fused steps
/// write over a product's output instead of allocating one buffer per operation.
fn in_place(tensor: &Tensor, f: impl Fn(&mut [f32]) -> Result<()>) -> Result<()> {
    tensor.inplace_op1(&InPlace(f))
}

struct InPlace<F>(F);

impl<F: Fn(&mut [f32]) -> Result<()>> candle_core::InplaceOp1 for InPlace<F> {
    fn name(&self) -> &'static str {
        "bert-fused"
    }

    fn cpu_fwd(
        &self,
        storage: &mut candle_core::CpuStorage,
        layout: &candle_core::Layout,
    ) -> Result<()> {
        let candle_core::CpuStorage::F32(values) = storage else {
            bail!("the encoder computes in f32")
        };
        let Some((start, end)) = layout.contiguous_offsets() else {
            bail!("the encoder writes contiguous tensors only")
        };
        (self.0)(&mut values[start..end])
    }
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
