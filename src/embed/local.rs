//! A local sentence-transformers model (BERT family) run in process on the CPU with candle and
//! tokenizers: its stat key, its fingerprint, and the forward pass with pooling.
//!
//! The folder is read by `embed::folder`; this module owns the weights and the tokenizer. Texts
//! are tokenized (with their prefix, truncated to the maximum length), sorted by token count and
//! run in batches of similar length, so padding costs little; the attention mask keeps padding
//! out of attention and out of pooling. Every vector is L2-normalised.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::BertModel;
use tokenizers::{
    PaddingParams, Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy,
};

use super::folder::{self, ModelFolder, Pooling, Settings, model_error};
use super::{Embedder, Fingerprint, LocalConfig};
use crate::error::Result;
use crate::ids::{MODEL_VERSION, StreamHash};

/// Texts per forward pass at most. Sorted by length, a batch's texts pad to nearly the same
/// length; more texts per batch buys nothing on a CPU and costs memory (the attention scores are
/// `batch × heads × length²` floats).
const BATCH_TEXTS: usize = 32;

/// Padded tokens per forward pass at most, so a batch of long texts stays as small in memory as
/// one of short texts.
const BATCH_TOKENS: usize = 4096;

/// A summary of the folder's files (path, size, mtime, ctime, inode) and of the settings: equal
/// keys mean an equal fingerprint, without reading a byte of the files.
pub fn stat_key(config: &LocalConfig) -> Result<String> {
    let dir = std::path::absolute(&config.dir).map_err(|error| {
        model_error(
            &config.dir,
            format!("the folder's path cannot be resolved: {error}"),
            "pass an existing folder",
        )
    })?;
    let files = folder::FILES
        .iter()
        .map(|name| {
            let path = dir.join(name);
            match std::fs::metadata(&path) {
                Ok(meta) => Ok(serde_json::json!([
                    name,
                    meta.len(),
                    meta.mtime(),
                    meta.mtime_nsec(),
                    meta.ctime(),
                    meta.ctime_nsec(),
                    meta.ino(),
                ])),
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                    Ok(serde_json::json!([name, null]))
                }
                Err(error) => Err(model_error(
                    &config.dir,
                    format!("{name} cannot be examined: {error}"),
                    "check the folder's permissions",
                )),
            }
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(serde_json::json!({
        "kind": "local",
        "dir": dir.to_string_lossy(),
        "files": files,
        "query_prefix": config.query_prefix,
        "passage_prefix": config.passage_prefix,
        "max_tokens": config.max_tokens,
    })
    .to_string())
}

/// The hash of the weights (streamed, never held whole), `tokenizer.json`, `config.json` and the
/// resolved settings. Reads the weights once; loads nothing.
pub fn fingerprint(config: &LocalConfig) -> Result<Fingerprint> {
    let folder = ModelFolder::read(config)?;
    let tokenizer_bytes = read_whole(&folder.dir, folder::TOKENIZER)?;
    let mut hash = StreamHash::new(MODEL_VERSION);
    hash_weights_streamed(&folder.dir, &mut hash)?;
    Ok(finish_fingerprint(hash, &folder, &tokenizer_bytes))
}

/// A loaded model: BERT weights on the CPU, the tokenizer, the settings and the thread pool
/// the forward pass runs on.
pub struct LocalModel {
    folder: ModelFolder,
    model: BertModel,
    tokenizer: Tokenizer,
    fingerprint: Fingerprint,
    threads: usize,
    pool: rayon::ThreadPool,
}

impl LocalModel {
    /// Reads the folder, the tokenizer and the weights (once: they are fingerprinted from the
    /// same bytes candle loads).
    pub fn load(config: &LocalConfig) -> Result<LocalModel> {
        let folder = ModelFolder::read(config)?;
        let dir = folder.dir.clone();
        let tokenizer_bytes = read_whole(&dir, folder::TOKENIZER)?;
        let tokenizer = tokenizer(&dir, &tokenizer_bytes, &folder.settings)?;
        let weights = read_whole(&dir, folder::WEIGHTS)?;

        let mut hash = StreamHash::new(MODEL_VERSION);
        hash.part(&weights);
        let fingerprint = finish_fingerprint(hash, &folder, &tokenizer_bytes);

        let weights = VarBuilder::from_buffered_safetensors(weights, DType::F32, &Device::Cpu)
            .map_err(|error| {
                model_error(
                    &dir,
                    format!(
                        "{} is not a readable safetensors file (truncated or damaged?): {error}",
                        folder::WEIGHTS
                    ),
                    "download the model folder again",
                )
            })?;
        let model = BertModel::load(weights, &folder.bert).map_err(|error| {
            model_error(
                &dir,
                format!(
                    "{} does not hold the BERT weights {} describes: {error}",
                    folder::WEIGHTS,
                    folder::CONFIG
                ),
                "download the model folder again; a folder with weights of another architecture cannot be used",
            )
        })?;

        let threads = config
            .threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from))
            .max(1);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|index| format!("embed-{index}"))
            .build()
            .map_err(|error| {
                model_error(
                    &dir,
                    format!("cannot start {threads} threads for the model: {error}"),
                    "set fewer threads",
                )
            })?;
        Ok(LocalModel {
            folder,
            model,
            tokenizer,
            fingerprint,
            threads,
            pool,
        })
    }

    pub fn settings(&self) -> &Settings {
        &self.folder.settings
    }

    /// Vectors of `texts`, each preceded by `prefix`, in the order given.
    fn embed(&self, texts: &[&str], prefix: &str) -> Result<Vec<Vec<f32>>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        self.pool.install(|| {
            let inputs = texts
                .iter()
                .map(|text| format!("{prefix}{text}"))
                .collect::<Vec<String>>();
            let encodings = self
                .tokenizer
                .encode_batch(inputs, true)
                .map_err(|error| self.error(format!("cannot tokenize: {error}")))?;
            let lengths = encodings
                .iter()
                .map(|encoding| encoding.get_ids().len().max(1))
                .collect::<Vec<_>>();
            let mut vectors = vec![Vec::new(); texts.len()];
            for batch in batches_by_length(&lengths) {
                let rows = self.forward(&batch, &encodings)?;
                for (index, row) in batch.into_iter().zip(rows) {
                    vectors[index] = row;
                }
            }
            Ok(vectors)
        })
    }

    /// One forward pass over the texts `batch` names, padded to the longest of them.
    fn forward(
        &self,
        batch: &[usize],
        encodings: &[tokenizers::Encoding],
    ) -> Result<Vec<Vec<f32>>> {
        let width = batch
            .iter()
            .map(|&index| encodings[index].get_ids().len())
            .max()
            .unwrap_or(0)
            .max(1);
        let rows = batch.len();
        let mut ids = vec![0u32; rows * width];
        let mut type_ids = vec![0u32; rows * width];
        let mut mask = vec![0u32; rows * width];
        for (row, &index) in batch.iter().enumerate() {
            let encoding = &encodings[index];
            let start = row * width;
            let n = encoding.get_ids().len();
            ids[start..start + n].copy_from_slice(encoding.get_ids());
            type_ids[start..start + n].copy_from_slice(encoding.get_type_ids());
            mask[start..start + n].copy_from_slice(encoding.get_attention_mask());
        }
        let run = || -> candle_core::Result<Vec<Vec<f32>>> {
            let device = &Device::Cpu;
            let ids = Tensor::from_vec(ids, (rows, width), device)?;
            let type_ids = Tensor::from_vec(type_ids, (rows, width), device)?;
            let mask = Tensor::from_vec(mask, (rows, width), device)?;
            let hidden = self.model.forward(&ids, &type_ids, Some(&mask))?;
            let pooled = pool(&hidden, &mask, self.folder.settings.pooling)?;
            let norms = pooled
                .sqr()?
                .sum_keepdim(1)?
                .sqrt()?
                .clamp(1e-12f32, f32::MAX)?;
            pooled.broadcast_div(&norms)?.to_vec2::<f32>()
        };
        run().map_err(|error| self.error(format!("the forward pass failed: {error}")))
    }

    fn error(&self, message: String) -> crate::error::Error {
        model_error(
            &self.folder.dir,
            message,
            "this is a bug if the model loaded; report it with the model folder's name",
        )
    }
}

impl Embedder for LocalModel {
    fn fingerprint(&self) -> Fingerprint {
        self.fingerprint
    }

    fn dims(&self) -> usize {
        self.folder.bert.hidden_size
    }

    fn describe(&self) -> serde_json::Value {
        let settings = &self.folder.settings;
        serde_json::json!({
            "kind": "local",
            "path": self.folder.dir.to_string_lossy(),
            "name": self.folder.dir.file_name().map(|name| name.to_string_lossy()),
            "dims": self.dims(),
            "pooling": settings.pooling.name(),
            "normalize": settings.normalize,
            "query_prefix": settings.query_prefix,
            "passage_prefix": settings.passage_prefix,
            "max_tokens": settings.max_tokens,
            "threads": self.threads,
        })
    }

    fn embed_passages(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>> {
        self.embed(texts, &self.folder.settings.passage_prefix)
    }

    fn embed_query(&self, text: &str) -> Result<Vec<f32>> {
        let mut vectors = self.embed(&[text], &self.folder.settings.query_prefix)?;
        Ok(vectors.pop().unwrap_or_default())
    }
}

/// Indices of texts grouped into batches of similar token counts: sorted by length (stable, so
/// equal lengths keep their order), then cut at `BATCH_TEXTS` texts or `BATCH_TOKENS` padded
/// tokens, whichever comes first.
pub fn batches_by_length(lengths: &[usize]) -> Vec<Vec<usize>> {
    let mut order = (0..lengths.len()).collect::<Vec<_>>();
    order.sort_by_key(|&index| lengths[index]);
    let mut batches = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    for index in order {
        // Sorted ascending, so the newest text is the longest: the padded size is its length
        // times the batch's count.
        let padded = lengths[index] * (current.len() + 1);
        if !current.is_empty() && (current.len() == BATCH_TEXTS || padded > BATCH_TOKENS) {
            batches.push(std::mem::take(&mut current));
        }
        current.push(index);
    }
    if !current.is_empty() {
        batches.push(current);
    }
    batches
}

/// Token vectors `[batch, tokens, hidden]` to one vector per text, padding excluded.
fn pool(hidden: &Tensor, mask: &Tensor, pooling: Pooling) -> candle_core::Result<Tensor> {
    match pooling {
        Pooling::Cls => hidden.narrow(1, 0, 1)?.squeeze(1),
        Pooling::Mean => {
            let weights = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
            let sums = hidden.broadcast_mul(&weights)?.sum(1)?;
            let counts = weights.sum(1)?.clamp(1e-9f32, f32::MAX)?;
            sums.broadcast_div(&counts)
        }
        Pooling::Max => {
            // As sentence-transformers does: padding set to -1e9, so it never wins the max.
            let keep = mask.unsqueeze(2)?.broadcast_as(hidden.shape())?;
            let floor = Tensor::full(-1e9f32, hidden.shape(), hidden.device())?;
            keep.where_cond(hidden, &floor)?.max(1)
        }
    }
}

/// The tokenizer, set to truncate at the maximum length and never to pad (batches pad themselves).
fn tokenizer(dir: &Path, bytes: &[u8], settings: &Settings) -> Result<Tokenizer> {
    let mut tokenizer = Tokenizer::from_bytes(bytes).map_err(|error| {
        model_error(
            dir,
            format!(
                "{} is not a Hugging Face tokenizer this build can read: {error}",
                folder::TOKENIZER
            ),
            "download the model folder again",
        )
    })?;
    tokenizer
        .with_padding(None::<PaddingParams>)
        .with_truncation(Some(TruncationParams {
            max_length: settings.max_tokens,
            strategy: TruncationStrategy::LongestFirst,
            stride: 0,
            direction: TruncationDirection::Right,
        }))
        .map_err(|error| {
            model_error(
                dir,
                format!(
                    "{} rejects a maximum length of {}: {error}",
                    folder::TOKENIZER,
                    settings.max_tokens
                ),
                "set another maximum length",
            )
        })?;
    Ok(tokenizer)
}

fn read_whole(dir: &Path, name: &str) -> Result<Vec<u8>> {
    std::fs::read(dir.join(name)).map_err(|error| {
        model_error(
            dir,
            format!("{name} cannot be read: {error}"),
            "check that the model folder is complete and readable",
        )
    })
}

/// Feeds the weights file as one `part` (its length, then its bytes) without holding it whole;
/// fails if the file changes size while it is read.
fn hash_weights_streamed(dir: &Path, hash: &mut StreamHash) -> Result<()> {
    let cannot = |error: std::io::Error| {
        model_error(
            dir,
            format!("{} cannot be read: {error}", folder::WEIGHTS),
            "check that the model folder is complete and readable",
        )
    };
    let mut file = File::open(dir.join(folder::WEIGHTS)).map_err(cannot)?;
    let expected = file.metadata().map_err(cannot)?.len();
    // The same framing as `StreamHash::part`: the length, then the bytes.
    hash.raw(&expected.to_le_bytes());
    let mut buffer = vec![0u8; 1 << 20];
    let mut seen = 0u64;
    loop {
        let n = file.read(&mut buffer).map_err(cannot)?;
        if n == 0 {
            break;
        }
        seen += n as u64;
        hash.raw(&buffer[..n]);
    }
    if seen != expected {
        return Err(model_error(
            dir,
            format!(
                "{} changed while it was read ({expected} bytes, then {seen})",
                folder::WEIGHTS
            ),
            "run again once the model folder is no longer being written",
        ));
    }
    Ok(())
}

/// Everything after the weights, each through `part`, in a fixed order.
fn finish_fingerprint(mut hash: StreamHash, folder: &ModelFolder, tokenizer: &[u8]) -> Fingerprint {
    let settings = &folder.settings;
    hash.part(tokenizer)
        .part(&folder.config_bytes)
        .part(settings.pooling.name().as_bytes())
        .part(&[u8::from(settings.normalize)])
        .part(settings.query_prefix.as_bytes())
        .part(settings.passage_prefix.as_bytes())
        .part(&(settings.max_tokens as u64).to_le_bytes());
    Fingerprint(hash.finish())
}

#[cfg(test)]
mod tests {
    use super::batches_by_length;

    #[test]
    fn batches_sort_by_length_and_respect_both_caps() {
        assert_eq!(batches_by_length(&[]), Vec::<Vec<usize>>::new());
        assert_eq!(batches_by_length(&[5, 1, 3]), vec![vec![1, 2, 0]]);
        // 33 short texts: cut at 32 texts.
        let short = vec![4; 33];
        let batches = batches_by_length(&short);
        assert_eq!(
            batches.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![32, 1]
        );
        // Long texts: cut at 4,096 padded tokens (16 × 256).
        let long = vec![256; 20];
        let batches = batches_by_length(&long);
        assert_eq!(
            batches.iter().map(Vec::len).collect::<Vec<_>>(),
            vec![16, 4]
        );
        // Every index exactly once.
        let mixed = [7, 300, 2, 2, 90, 512, 1];
        let mut all = batches_by_length(&mixed).concat();
        all.sort_unstable();
        assert_eq!(all, (0..mixed.len()).collect::<Vec<_>>());
    }
}
