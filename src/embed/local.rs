//! A local sentence-transformers model (BERT family) run in process on the CPU with candle and
//! tokenizers: its stat key, its fingerprint, and the forward pass with pooling.
//!
//! The folder is read by `embed::folder`; this module owns the weights and the tokenizer. Texts
//! are tokenized (with their prefix, truncated to the maximum length) and cut into packs of about
//! `Kernel::pack_tokens` tokens; the packs run side by side on the model's threads, one per thread,
//! through `embed::bert` (which packs a pack's texts without padding). Every vector is
//! L2-normalised.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use candle_core::{DType, Device};
use candle_nn::VarBuilder;
use rayon::prelude::*;
use tokenizers::{
    PaddingParams, Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy,
};

use super::bert::{Encoder, Hidden};
use super::folder::{self, ModelFolder, Pooling, Settings, model_error};
use super::{Embedder, Fingerprint, LocalConfig};
use crate::error::Result;
use crate::ids::{MODEL_VERSION, StreamHash};

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
    let tokenizer_bytes = read_tokenizer(&folder.dir)?;
    let mut hash = StreamHash::new(MODEL_VERSION);
    hash_weights_streamed(&folder, &mut hash)?;
    Ok(finish_fingerprint(hash, &folder, &tokenizer_bytes))
}

/// A loaded model: BERT weights on the CPU, the tokenizer, the settings and the thread pool
/// the forward pass runs on.
pub struct LocalModel {
    folder: ModelFolder,
    model: Encoder,
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
        let tokenizer_bytes = read_tokenizer(&dir)?;
        let tokenizer = tokenizer(&dir, &tokenizer_bytes, &folder.settings)?;
        let weights_size = std::fs::metadata(dir.join(folder::WEIGHTS))
            .map_err(|error| {
                model_error(
                    &dir,
                    format!("{} cannot be read: {error}", folder::WEIGHTS),
                    "check that the model folder is complete and readable",
                )
            })?
            .len();
        folder.check_weights_size(weights_size)?;
        // Read within the size the model's `config.json` allows, from a regular file only: the
        // size is checked on the open file and the read stops past the limit, so a file that
        // grows meanwhile, or a link to a device, costs at most the limit.
        let weights = folder::read_bounded(&dir, folder::WEIGHTS, folder.max_weights_bytes())?
            .ok_or_else(|| {
                model_error(
                    &dir,
                    format!("{} is missing", folder::WEIGHTS),
                    "check that the model folder is complete and readable",
                )
            })?;

        let mut hash = StreamHash::new(MODEL_VERSION);
        hash.part(&weights);
        let fingerprint = finish_fingerprint(hash, &folder, &tokenizer_bytes);

        let weights = VarBuilder::from_buffered_safetensors(weights, DType::F32, &Device::Cpu)
            .map_err(|error| {
                model_error(
                    &dir,
                    format!(
                        "{} is not a readable safetensors file (truncated or damaged?): {}",
                        folder::WEIGHTS,
                        candle_message(&error)
                    ),
                    "download the model folder again",
                )
            })?;
        let model = Encoder::load(weights, &folder.bert, config.precision).map_err(|error| {
            model_error(
                &dir,
                format!(
                    "{} does not hold the BERT weights {} describes: {}",
                    folder::WEIGHTS,
                    folder::CONFIG,
                    candle_message(&error)
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
                .map(|encoding| encoding.get_ids().len())
                .collect::<Vec<_>>();
            // One pack per task: each runs on one thread, and rayon hands the next pack to
            // whichever thread is free.
            let packs = packs_by_length(&lengths, self.model.kernel().pack_tokens());
            let rows = packs
                .par_iter()
                .map(|pack| self.forward(pack, &encodings))
                .collect::<Result<Vec<_>>>()?;
            let mut vectors = vec![Vec::new(); texts.len()];
            for (pack, rows) in packs.iter().zip(rows) {
                for (&index, row) in pack.iter().zip(rows) {
                    vectors[index] = row;
                }
            }
            Ok(vectors)
        })
    }

    /// The unit vectors of the texts `pack` names, in its order.
    fn forward(&self, pack: &[usize], encodings: &[tokenizers::Encoding]) -> Result<Vec<Vec<f32>>> {
        let texts = pack
            .iter()
            .map(|&index| {
                let encoding = &encodings[index];
                (encoding.get_ids(), encoding.get_type_ids())
            })
            .collect::<Vec<_>>();
        let hidden = self.model.forward(&texts).map_err(|error| {
            self.error(format!(
                "the forward pass failed: {}",
                candle_message(&error)
            ))
        })?;
        Ok((0..pack.len())
            .map(|text| {
                let mut vector = pool(&hidden, text, self.dims(), self.folder.settings.pooling);
                let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
                for x in &mut vector {
                    *x /= norm;
                }
                vector
            })
            .collect())
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
            "kernel": self.model.kernel().name(),
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

/// Indices of texts grouped into packs of about `budget` tokens: longest first (stable, so
/// equal lengths keep their order), so the packs that take longest start first and the last ones
/// are short; a pack closes when the next text would take it past `budget` (a text longer than
/// `budget` is a pack alone).
pub(crate) fn packs_by_length(lengths: &[usize], budget: usize) -> Vec<Vec<usize>> {
    let mut order = (0..lengths.len()).collect::<Vec<_>>();
    order.sort_by_key(|&index| std::cmp::Reverse(lengths[index]));
    let mut packs = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    let mut tokens = 0;
    for index in order {
        if !current.is_empty() && tokens + lengths[index] > budget {
            packs.push(std::mem::take(&mut current));
            tokens = 0;
        }
        current.push(index);
        tokens += lengths[index];
    }
    if !current.is_empty() {
        packs.push(current);
    }
    packs
}

/// One text's token vectors (`text` of the pack) to one vector, as sentence-transformers pools.
fn pool(hidden: &Hidden, text: usize, dims: usize, pooling: Pooling) -> Vec<f32> {
    let (start, len) = hidden.spans[text];
    let rows = hidden.values[start * dims..(start + len) * dims].chunks_exact(dims);
    match pooling {
        Pooling::Cls => hidden.values[start * dims..(start + 1) * dims].to_vec(),
        Pooling::Mean => {
            let mut sums = vec![0f32; dims];
            for row in rows {
                for (sum, x) in sums.iter_mut().zip(row) {
                    *sum += x;
                }
            }
            let count = (len as f32).max(1e-9);
            sums.iter().map(|sum| sum / count).collect()
        }
        Pooling::Max => {
            let mut maxima = vec![f32::NEG_INFINITY; dims];
            for row in rows {
                for (max, &x) in maxima.iter_mut().zip(row) {
                    *max = max.max(x);
                }
            }
            maxima
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
    // Every text must give the forward pass at least one token: a tokenizer that adds no
    // special tokens turns an empty or blank text into none, and would fail the whole page of
    // texts it came in (or, pooled by CLS, read the next text's first token).
    let empty = tokenizer
        .encode("", true)
        .map_or(0, |encoding| encoding.get_ids().len());
    if empty == 0 {
        return Err(model_error(
            dir,
            format!(
                "{} adds no special tokens, so an empty text has no tokens to embed",
                folder::TOKENIZER
            ),
            "use the tokenizer.json published with the model (with its post-processor)",
        ));
    }
    // A prefix that fills the maximum length leaves no token for the text: every passage (or
    // every query) would get the prefix's own vector.
    for (prefix, what) in [
        (&settings.query_prefix, "query"),
        (&settings.passage_prefix, "passage"),
    ] {
        let tokens = tokenizer
            .encode(prefix.as_str(), false)
            .map_or(0, |encoding| encoding.get_ids().len());
        if tokens + empty >= settings.max_tokens {
            return Err(model_error(
                dir,
                format!(
                    "the {what} prefix takes {tokens} of the {} tokens a text is cut to, leaving none for the text",
                    settings.max_tokens
                ),
                "shorten the prefix, or raise the maximum length",
            ));
        }
    }
    Ok(tokenizer)
}

/// A candle error as one message, without the backtrace candle captures into its errors when
/// `RUST_BACKTRACE` is set (its `Display` prints it, dozens of lines of frames): an error about
/// a model folder is for the user, who needs what is wrong and with which file.
fn candle_message(error: &candle_core::Error) -> String {
    use candle_core::Error as E;
    match error {
        E::WithBacktrace { inner, .. } => candle_message(inner),
        E::Context { inner, context } => format!("{context}: {}", candle_message(inner)),
        E::WithPath { inner, path } => {
            format!("{}: {}", path.display(), candle_message(inner))
        }
        other => other.to_string(),
    }
}

/// `tokenizer.json`, bounded (`folder::MAX_TOKENIZER_BYTES`).
fn read_tokenizer(dir: &Path) -> Result<Vec<u8>> {
    folder::read_bounded(dir, folder::TOKENIZER, folder::MAX_TOKENIZER_BYTES)?.ok_or_else(|| {
        model_error(
            dir,
            format!("{} is missing", folder::TOKENIZER),
            "check that the model folder is complete and readable",
        )
    })
}

/// Feeds the weights file as one `part` (its length, then its bytes) without holding it whole;
/// fails if the file changes size while it is read, or is larger than the model `config.json`
/// describes can be (`ModelFolder::check_weights_size`).
fn hash_weights_streamed(model_folder: &ModelFolder, hash: &mut StreamHash) -> Result<()> {
    let dir = &model_folder.dir;
    let cannot = |error: std::io::Error| {
        model_error(
            dir,
            format!("{} cannot be read: {error}", folder::WEIGHTS),
            "check that the model folder is complete and readable",
        )
    };
    let mut file = File::open(dir.join(folder::WEIGHTS)).map_err(cannot)?;
    let expected = file.metadata().map_err(cannot)?.len();
    model_folder.check_weights_size(expected)?;
    check_weights_complete(dir, &file, expected)?;
    // The same framing as `StreamHash::part`: the length, then the bytes.
    hash.raw(&expected.to_le_bytes());
    let mut buffer = vec![0u8; 1 << 20];
    let mut seen = 0u64;
    // A file growing meanwhile is read no further than just past its size.
    while seen <= expected {
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

/// Refuses a weights file whose safetensors header describes more (or less) data than the file
/// holds: a download cut short must be an unreadable model, not a model of its own with a new
/// fingerprint that fails only when it is loaded. Reads the header alone.
fn check_weights_complete(dir: &Path, file: &File, size: u64) -> Result<()> {
    use std::os::unix::fs::FileExt;
    let damaged = |what: String| {
        model_error(
            dir,
            format!(
                "{} is not a complete safetensors file (truncated or damaged?): {what}",
                folder::WEIGHTS
            ),
            "download the model folder again",
        )
    };
    let mut length = [0u8; 8];
    file.read_exact_at(&mut length, 0)
        .map_err(|error| damaged(format!("its header cannot be read: {error}")))?;
    let header_length = u64::from_le_bytes(length);
    // safetensors' own bound on the header, so a damaged length never asks for gigabytes.
    const MAX_HEADER_BYTES: u64 = 100_000_000;
    if header_length > MAX_HEADER_BYTES || 8 + header_length > size {
        return Err(damaged(format!(
            "its header claims {header_length} bytes, the file has {size}"
        )));
    }
    let mut header = vec![0u8; header_length as usize];
    file.read_exact_at(&mut header, 8)
        .map_err(|error| damaged(format!("its header cannot be read: {error}")))?;
    let metadata: safetensors::tensor::Metadata = serde_json::from_slice(&header)
        .map_err(|error| damaged(format!("its header is not valid: {error}")))?;
    let described = 8 + header_length + metadata.data_len() as u64;
    if described != size {
        return Err(damaged(format!(
            "its header describes {described} bytes, the file has {size}"
        )));
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
    use super::packs_by_length;

    #[test]
    fn packs_go_longest_first_and_respect_the_budget() {
        assert_eq!(packs_by_length(&[], 10), Vec::<Vec<usize>>::new());
        assert_eq!(packs_by_length(&[5, 1, 3], 10), vec![vec![0, 2, 1]]);
        // A text longer than the budget is a pack alone; equal lengths keep their order.
        assert_eq!(
            packs_by_length(&[4, 12, 4, 4, 2], 10),
            vec![vec![1], vec![0, 2], vec![3, 4]]
        );
        // Every index exactly once, and no pack over budget unless it holds one text.
        let mixed = [7, 300, 2, 2, 90, 512, 1, 40, 40, 40];
        let packs = packs_by_length(&mixed, 100);
        for pack in &packs {
            assert!(pack.len() == 1 || pack.iter().map(|&i| mixed[i]).sum::<usize>() <= 100);
        }
        let mut all = packs.concat();
        all.sort_unstable();
        assert_eq!(all, (0..mixed.len()).collect::<Vec<_>>());
    }
}
