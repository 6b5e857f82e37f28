//! The local embedding model through the library: vectors as sentence-transformers makes them
//! (`tests/fixtures/minilm-reference.json`, made by `benches/minilm_reference.py`), the folder's
//! settings (pooling, normalisation, prompts, family prefixes, overrides), the fingerprint and
//! stat key, and an error naming folder, file and fix for each way a folder can be unusable.
//!
//! Tests that run the model need `../shared/models/all-MiniLM-L6-v2` (or `GROUNDIDX_MODELS`);
//! without it they skip with a message, or fail under `CI`.

use std::fs;
use std::path::{Path, PathBuf};

use groundidx::embed::folder::{ModelFolder, Pooling};
use groundidx::embed::local::LocalModel;
use groundidx::embed::{self, Embedder, LocalConfig, ModelConfig};
use serde_json::{Value, json};

use crate::support::prerequisite_missing;

const MODEL_FILES: [&str; 3] = ["config.json", "model.safetensors", "tokenizer.json"];

/// The shared all-MiniLM-L6-v2 folder, or `None` (skipped, or a failure under CI).
fn minilm() -> Option<PathBuf> {
    let base = std::env::var_os("GROUNDIDX_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/models"));
    let path = base.join("all-MiniLM-L6-v2");
    if MODEL_FILES.iter().all(|name| path.join(name).is_file()) {
        Some(path)
    } else {
        prerequisite_missing(&format!(
            "model {} not found (set GROUNDIDX_MODELS to the models folder)",
            path.display()
        ));
        None
    }
}

fn reference() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/minilm-reference.json");
    serde_json::from_slice(&fs::read(path).expect("the fixture is in the repository"))
        .expect("the fixture is JSON")
}

fn floats(value: &Value) -> Vec<f32> {
    value
        .as_array()
        .expect("a vector is an array")
        .iter()
        .map(|x| x.as_f64().expect("a number") as f32)
        .collect()
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "vector lengths");
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (norm(a) * norm(b))
}

fn assert_unit(vector: &[f32]) {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!((norm - 1.0).abs() < 1e-4, "norm {norm}, expected 1");
}

fn local(dir: &Path) -> LocalConfig {
    LocalConfig {
        dir: dir.to_path_buf(),
        threads: Some(2),
        ..LocalConfig::default()
    }
}

/// A folder named `name` in a temp dir, with the model's big files linked from `source` and
/// everything else written by the test.
fn linked_folder(source: &Path, name: &str) -> (tempfile::TempDir, PathBuf) {
    let temp = tempfile::tempdir().expect("temp dir");
    let dir = temp.path().join(name);
    fs::create_dir(&dir).expect("model dir");
    for file in MODEL_FILES {
        std::os::unix::fs::symlink(source.join(file), dir.join(file)).expect("link");
    }
    fs::write(
        dir.join("sentence_bert_config.json"),
        r#"{"max_seq_length": 256}"#,
    )
    .expect("sentence bert");
    (temp, dir)
}

fn write_pooling(dir: &Path, mode: &str) {
    fs::create_dir_all(dir.join("1_Pooling")).expect("pooling dir");
    let pooling = json!({
        "word_embedding_dimension": 384,
        "pooling_mode_cls_token": mode == "cls",
        "pooling_mode_mean_tokens": mode == "mean",
        "pooling_mode_max_tokens": mode == "max",
        "pooling_mode_mean_sqrt_len_tokens": false,
    });
    fs::write(dir.join("1_Pooling/config.json"), pooling.to_string()).expect("write pooling");
}

/// A folder with everything but real weights: enough for settings and fingerprints.
fn synthetic_folder(name: &str) -> (tempfile::TempDir, PathBuf) {
    let temp = tempfile::tempdir().expect("temp dir");
    let dir = temp.path().join(name);
    fs::create_dir(&dir).expect("model dir");
    fs::write(dir.join("config.json"), bert_config(384).to_string()).expect("config");
    fs::write(
        dir.join("tokenizer.json"),
        b"{\"not\": \"parsed by the fingerprint\"}",
    )
    .expect("tokenizer");
    fs::write(dir.join("model.safetensors"), fake_weights(3 << 20)).expect("weights");
    write_pooling(&dir, "mean");
    fs::create_dir(dir.join("2_Normalize")).expect("normalize");
    fs::write(
        dir.join("sentence_bert_config.json"),
        r#"{"max_seq_length": 256, "do_lower_case": false}"#,
    )
    .expect("sentence bert");
    (temp, dir)
}

/// A complete safetensors file of one tensor of `n` bytes, all 7: what a fingerprint reads,
/// though no model loads it.
fn fake_weights(n: usize) -> Vec<u8> {
    let header = json!({"w": {"dtype": "U8", "shape": [n], "data_offsets": [0, n]}}).to_string();
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.resize(bytes.len() + n, 7);
    bytes
}

fn bert_config(hidden_size: usize) -> Value {
    json!({
        "architectures": ["BertModel"],
        "attention_probs_dropout_prob": 0.1,
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "hidden_size": hidden_size,
        "initializer_range": 0.02,
        "intermediate_size": 1536,
        "layer_norm_eps": 1e-12,
        "max_position_embeddings": 512,
        "model_type": "bert",
        "num_attention_heads": 12,
        "num_hidden_layers": 6,
        "pad_token_id": 0,
        "position_embedding_type": "absolute",
        "type_vocab_size": 2,
        "vocab_size": 30522
    })
}

fn model_error(result: groundidx::error::Result<impl Sized>) -> String {
    match result {
        Err(error @ groundidx::error::Error::Model { .. }) => error.to_string(),
        Err(other) => panic!("expected a model error, got {other:?}"),
        Ok(_) => panic!("expected a model error, got success"),
    }
}

fn assert_names(message: &str, dir: &Path, file: &str) {
    assert!(
        message.contains(&dir.display().to_string()),
        "no folder in {message:?}"
    );
    assert!(message.contains(file), "no {file} in {message:?}");
    assert!(message.contains("\nhint: "), "no hint in {message:?}");
}

/// What /proc/cpuinfo says of AMX tiles with bfloat16 products.
fn cpu_has_amx_bf16() -> bool {
    let info = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    info.lines()
        .find(|line| line.starts_with("flags"))
        .is_some_and(|flags| {
            let flags: Vec<&str> = flags.split_whitespace().collect();
            flags.contains(&"amx_tile") && flags.contains(&"amx_bf16")
        })
}

/// Both precisions give sentence-transformers' vectors (cosine ≥ 0.999 to its float32), and
/// each says which kernel ran: `auto` runs bfloat16 on AMX tiles exactly where the CPU has
/// them, `float32` never does.
#[test]
fn minilm_vectors_match_sentence_transformers() {
    let Some(dir) = minilm() else { return };
    let reference = reference();
    let cases = reference["cases"].as_array().expect("cases");
    let texts = cases
        .iter()
        .map(|case| case["text"].as_str().expect("text"))
        .collect::<Vec<_>>();
    let mut by_precision = Vec::new();
    for precision in [embed::Precision::Auto, embed::Precision::Float32] {
        let model = LocalModel::load(&LocalConfig {
            precision,
            ..local(&dir)
        })
        .expect("load all-MiniLM-L6-v2");
        assert_eq!(model.dims(), 384);
        let kernel = model.describe()["kernel"].clone();
        let expected = if precision == embed::Precision::Auto && cpu_has_amx_bf16() {
            "amx-bf16"
        } else {
            "float32"
        };
        assert_eq!(kernel, expected, "the kernel of {precision:?}");
        // One call over texts of very different lengths: batching by length must give each
        // vector back in its place.
        let vectors = model.embed_passages(&texts).expect("embed");
        assert_eq!(vectors.len(), texts.len());
        for (case, vector) in cases.iter().zip(&vectors) {
            assert_unit(vector);
            let similarity = cosine(vector, &floats(&case["vector"]));
            assert!(
                similarity >= 0.999,
                "{precision:?}: cosine {similarity} for {:?}",
                case["text"]
            );
        }
        // A query alone (no padding at all) gives the same vector as in a batch.
        let alone = model.embed_query(texts[2]).expect("embed query");
        assert!(
            cosine(&alone, &vectors[2]) > 0.99999,
            "{precision:?}: query and passage vectors differ"
        );
        by_precision.push(vectors);
    }
    for (auto, float32) in by_precision[0].iter().zip(&by_precision[1]) {
        let similarity = cosine(auto, float32);
        assert!(
            similarity >= 0.999,
            "auto against float32: cosine {similarity}"
        );
    }
}

#[test]
fn other_poolings_and_prompts_match_sentence_transformers() {
    let Some(source) = minilm() else { return };
    let reference = reference();
    for (mode, key) in [("cls", "cls_unnormalised"), ("max", "max_unnormalised")] {
        // No 2_Normalize: sentence-transformers leaves these unnormalised; only the direction
        // is compared, and ours are unit vectors all the same.
        let (_temp, dir) = linked_folder(&source, "minilm-variant");
        write_pooling(&dir, mode);
        let model = LocalModel::load(&local(&dir)).expect("load variant");
        assert!(!model.settings().normalize);
        for case in reference[key].as_array().expect("cases") {
            let vector = model
                .embed_passages(&[case["text"].as_str().expect("text")])
                .expect("embed")
                .remove(0);
            assert_unit(&vector);
            let similarity = cosine(&vector, &floats(&case["vector"]));
            assert!(
                similarity >= 0.999,
                "{mode}: cosine {similarity} for {:?}",
                case["text"]
            );
        }
    }

    let (_temp, dir) = linked_folder(&source, "minilm-prompted");
    write_pooling(&dir, "mean");
    fs::write(
        dir.join("config_sentence_transformers.json"),
        json!({"prompts": {"query": reference["query_prompt"]["prompt"]}}).to_string(),
    )
    .expect("prompts");
    let model = LocalModel::load(&local(&dir)).expect("load prompted");
    for case in reference["query_prompt"]["cases"]
        .as_array()
        .expect("cases")
    {
        let text = case["text"].as_str().expect("text");
        let query = model.embed_query(text).expect("embed query");
        let similarity = cosine(&query, &floats(&case["vector"]));
        assert!(
            similarity >= 0.999,
            "prompted query: cosine {similarity} for {text:?}"
        );
        // Passages get no prefix here, so they differ from the prompted query.
        let passage = model.embed_passages(&[text]).expect("embed").remove(0);
        assert!(
            cosine(&passage, &query) < 0.9999,
            "the query prompt was not applied"
        );
    }
}

#[test]
fn fingerprint_is_the_loaded_one_and_follows_the_weights_and_settings() {
    let Some(dir) = minilm() else { return };
    let config = local(&dir);
    let streamed =
        embed::fingerprint(&ModelConfig::Local(config.clone()), &[]).expect("fingerprint");
    let model = embed::load(&ModelConfig::Local(config.clone()), &[]).expect("load");
    assert_eq!(
        model.fingerprint(),
        streamed,
        "streamed and loaded fingerprints differ"
    );
    let described = model.describe();
    assert_eq!(described["pooling"], "mean");
    assert_eq!(described["max_tokens"], 256);
    assert_eq!(described["dims"], 384);
    assert_eq!(described["normalize"], true);
}

#[test]
fn fingerprint_and_stat_key_change_exactly_when_an_input_does() {
    let (_temp, dir) = synthetic_folder("plain-model");
    let fingerprint = |config: &LocalConfig| {
        embed::fingerprint(&ModelConfig::Local(config.clone()), &[]).expect("fingerprint")
    };
    let stat_key = |config: &LocalConfig| {
        embed::stat_key(&ModelConfig::Local(config.clone())).expect("stat key")
    };
    let base = local(&dir);
    let first = fingerprint(&base);
    let first_key = stat_key(&base);

    // Touching nothing keeps both; the thread count is no input.
    assert_eq!(fingerprint(&base), first);
    let more_threads = LocalConfig {
        threads: Some(7),
        ..base.clone()
    };
    assert_eq!(stat_key(&more_threads), first_key);
    assert_eq!(fingerprint(&more_threads), first);

    // Each setting changes the fingerprint and the stat key.
    let changed = [
        LocalConfig {
            query_prefix: Some("query: ".into()),
            ..base.clone()
        },
        LocalConfig {
            passage_prefix: Some("passage: ".into()),
            ..base.clone()
        },
        LocalConfig {
            max_tokens: Some(128),
            ..base.clone()
        },
    ];
    for config in &changed {
        assert_ne!(fingerprint(config), first, "{config:?}");
        assert_ne!(stat_key(config), first_key, "{config:?}");
    }
    // The same value as the folder's is the same model.
    let same_max = LocalConfig {
        max_tokens: Some(256),
        ..base.clone()
    };
    assert_eq!(fingerprint(&same_max), first);

    // Pooling and normalisation are inputs.
    write_pooling(&dir, "cls");
    let cls = fingerprint(&base);
    assert_ne!(cls, first);
    fs::remove_dir(dir.join("2_Normalize")).expect("remove normalize");
    assert_ne!(fingerprint(&base), cls);
    write_pooling(&dir, "mean");
    fs::create_dir(dir.join("2_Normalize")).expect("normalize");
    assert_eq!(fingerprint(&base), first, "the same folder again");

    // One byte of the weights, in the middle of the file (past the first read buffer).
    let weights = dir.join("model.safetensors");
    let mut bytes = fs::read(&weights).expect("read weights");
    let middle = bytes.len() / 2 + 12_345;
    bytes[middle] ^= 1;
    fs::write(&weights, &bytes).expect("write weights");
    assert_ne!(fingerprint(&base), first, "a changed byte of the weights");
    assert_ne!(stat_key(&base), first_key, "a rewritten weights file");

    // The tokenizer and config.json are inputs too.
    let after_weights = fingerprint(&base);
    fs::write(dir.join("tokenizer.json"), b"{\"another\": 1}").expect("tokenizer");
    assert_ne!(fingerprint(&base), after_weights);
}

#[test]
fn folder_settings_come_from_config_then_folder_then_family() {
    let (_temp, dir) = synthetic_folder("all-minilm-like");
    let folder = ModelFolder::read(&local(&dir)).expect("read");
    assert_eq!(folder.settings.pooling, Pooling::Mean);
    assert!(folder.settings.normalize);
    assert_eq!(folder.settings.max_tokens, 256);
    assert_eq!(folder.settings.query_prefix, "");
    assert_eq!(folder.settings.passage_prefix, "");

    // CLS pooling, no 2_Normalize, no sentence_bert_config.json (the model's positions).
    write_pooling(&dir, "cls");
    fs::remove_dir(dir.join("2_Normalize")).expect("remove normalize");
    fs::remove_file(dir.join("sentence_bert_config.json")).expect("remove sentence bert");
    let folder = ModelFolder::read(&local(&dir)).expect("read");
    assert_eq!(folder.settings.pooling, Pooling::Cls);
    assert!(!folder.settings.normalize);
    assert_eq!(folder.settings.max_tokens, 512);

    // Prompts from config_sentence_transformers.json, "document" as the passage prompt.
    fs::write(
        dir.join("config_sentence_transformers.json"),
        r#"{"prompts": {"query": "search_query: ", "document": "search_document: "}}"#,
    )
    .expect("prompts");
    let folder = ModelFolder::read(&local(&dir)).expect("read");
    assert_eq!(folder.settings.query_prefix, "search_query: ");
    assert_eq!(folder.settings.passage_prefix, "search_document: ");

    // The configuration overrides the folder.
    let config = LocalConfig {
        query_prefix: Some("q: ".into()),
        passage_prefix: Some(String::new()),
        max_tokens: Some(64),
        ..local(&dir)
    };
    let folder = ModelFolder::read(&config).expect("read");
    assert_eq!(folder.settings.query_prefix, "q: ");
    assert_eq!(folder.settings.passage_prefix, "");
    assert_eq!(folder.settings.max_tokens, 64);
}

#[test]
fn bge_and_e5_folders_get_their_family_prefixes() {
    let (_bge_temp, bge) = synthetic_folder("bge-small-en-v1.5");
    write_pooling(&bge, "cls");
    let folder = ModelFolder::read(&local(&bge)).expect("read bge");
    assert_eq!(folder.settings.pooling, Pooling::Cls);
    assert_eq!(
        folder.settings.query_prefix,
        "Represent this sentence for searching relevant passages: "
    );
    assert_eq!(folder.settings.passage_prefix, "");

    let (_e5_temp, e5) = synthetic_folder("e5-small-v2");
    let folder = ModelFolder::read(&local(&e5)).expect("read e5");
    assert_eq!(folder.settings.pooling, Pooling::Mean);
    assert_eq!(folder.settings.query_prefix, "query: ");
    assert_eq!(folder.settings.passage_prefix, "passage: ");

    // A folder's own prompts win over the family's.
    fs::write(
        e5.join("config_sentence_transformers.json"),
        r#"{"prompts": {"query": "Q: "}}"#,
    )
    .expect("prompts");
    let folder = ModelFolder::read(&local(&e5)).expect("read e5");
    assert_eq!(folder.settings.query_prefix, "Q: ");
    assert_eq!(folder.settings.passage_prefix, "passage: ");
}

#[test]
fn unusable_folders_fail_with_the_folder_the_file_and_a_hint() {
    let (_temp, dir) = synthetic_folder("broken");
    let config = local(&dir);

    fs::rename(dir.join("tokenizer.json"), dir.join("tokenizer.json.away")).expect("hide");
    let message = model_error(LocalModel::load(&config));
    assert_names(&message, &dir, "tokenizer.json is missing");
    let message = model_error(embed::fingerprint(&ModelConfig::Local(config.clone()), &[]));
    assert_names(&message, &dir, "tokenizer.json is missing");
    fs::rename(dir.join("tokenizer.json.away"), dir.join("tokenizer.json")).expect("restore");

    fs::write(
        dir.join("config.json"),
        json!({"model_type": "gpt2", "n_layer": 12}).to_string(),
    )
    .expect("config");
    let message = model_error(ModelFolder::read(&config));
    assert_names(
        &message,
        &dir,
        "config.json describes a \"gpt2\" model, not a BERT one",
    );

    fs::write(dir.join("config.json"), b"{ not json").expect("config");
    assert_names(
        &model_error(ModelFolder::read(&config)),
        &dir,
        "config.json is not valid JSON",
    );

    fs::write(dir.join("config.json"), bert_config(384).to_string()).expect("config");
    let pooling = json!({"pooling_mode_mean_tokens": true, "pooling_mode_cls_token": true});
    fs::write(dir.join("1_Pooling/config.json"), pooling.to_string()).expect("pooling");
    assert_names(
        &model_error(ModelFolder::read(&config)),
        &dir,
        "1_Pooling/config.json asks for pooling",
    );
    write_pooling(&dir, "mean");

    let too_long = LocalConfig {
        max_tokens: Some(600),
        ..config.clone()
    };
    assert_names(
        &model_error(ModelFolder::read(&too_long)),
        &dir,
        "600 tokens is out of range",
    );

    let missing = tempfile::tempdir().expect("temp dir");
    let nowhere = missing.path().join("no-such-model");
    assert_names(
        &model_error(ModelFolder::read(&local(&nowhere))),
        &nowhere,
        "is not a folder",
    );
}

#[test]
fn damaged_weights_and_tokenizers_fail_with_the_file_and_a_hint() {
    let Some(source) = minilm() else { return };
    let (_temp, dir) = linked_folder(&source, "damaged");
    let config = local(&dir);
    let weights = fs::read(source.join("model.safetensors")).expect("read weights");

    // Cut in the header, then in the tensors.
    for cut in [100, 1 << 20] {
        fs::remove_file(dir.join("model.safetensors")).expect("unlink");
        fs::write(dir.join("model.safetensors"), &weights[..cut]).expect("truncated weights");
        let message = model_error(LocalModel::load(&config));
        assert_names(
            &message,
            &dir,
            "model.safetensors is not a readable safetensors file",
        );
        // The fingerprint refuses it too: a cut download is no model of its own.
        let message = model_error(embed::fingerprint(&ModelConfig::Local(config.clone()), &[]));
        assert_names(
            &message,
            &dir,
            "model.safetensors is not a complete safetensors file",
        );
    }

    // Weights of another shape than config.json says.
    fs::remove_file(dir.join("model.safetensors")).expect("unlink");
    std::os::unix::fs::symlink(
        source.join("model.safetensors"),
        dir.join("model.safetensors"),
    )
    .expect("link");
    fs::remove_file(dir.join("config.json")).expect("unlink");
    fs::write(dir.join("config.json"), bert_config(768).to_string()).expect("config");
    let message = model_error(LocalModel::load(&config));
    assert_names(
        &message,
        &dir,
        "model.safetensors does not hold the BERT weights config.json describes",
    );

    // A tokenizer.json that is not one.
    fs::remove_file(dir.join("config.json")).expect("unlink");
    std::os::unix::fs::symlink(source.join("config.json"), dir.join("config.json")).expect("link");
    fs::remove_file(dir.join("tokenizer.json")).expect("unlink");
    fs::write(dir.join("tokenizer.json"), b"{\"version\": \"1.0\"}").expect("tokenizer");
    let message = model_error(LocalModel::load(&config));
    assert_names(
        &message,
        &dir,
        "tokenizer.json is not a Hugging Face tokenizer",
    );

    // A tokenizer without its post-processor adds no [CLS] and [SEP]: an empty or blank
    // text would have no token at all, and fail every text embedded beside it.
    let mut tokenizer: serde_json::Value =
        serde_json::from_slice(&fs::read(source.join("tokenizer.json")).expect("read"))
            .expect("tokenizer.json is JSON");
    tokenizer["post_processor"] = serde_json::Value::Null;
    fs::remove_file(dir.join("tokenizer.json")).expect("unlink");
    fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).expect("tokenizer");
    let message = model_error(LocalModel::load(&config));
    assert_names(&message, &dir, "adds no special tokens");
}

#[test]
fn a_hostile_folder_is_refused_after_a_bounded_read_naming_the_file_and_the_limit() {
    let (_temp, dir) = synthetic_folder("hostile");
    let config = local(&dir);

    // A 4 MB prompt: every passage would be tokenized with it. Its file is over the bound of
    // a settings file, and refused before it is read.
    let prompts = |query: &str| json!({"prompts": {"query": query, "passage": ""}}).to_string();
    fs::write(
        dir.join("config_sentence_transformers.json"),
        prompts(&"x".repeat(4 << 20)),
    )
    .expect("prompts");
    let message = model_error(ModelFolder::read(&config));
    assert_names(&message, &dir, "config_sentence_transformers.json is");
    assert!(message.contains("over the limit of"), "{message}");

    // A prompt in a small file, still far longer than any real one.
    fs::write(
        dir.join("config_sentence_transformers.json"),
        prompts(&"x".repeat(5000)),
    )
    .expect("prompts");
    let message = model_error(ModelFolder::read(&config));
    assert_names(
        &message,
        &dir,
        "config_sentence_transformers.json: prompt \"query\"",
    );
    assert!(message.contains("limit of 4096 bytes"), "{message}");
    fs::write(
        dir.join("config_sentence_transformers.json"),
        prompts("query: "),
    )
    .expect("prompts");
    assert_eq!(
        ModelFolder::read(&config)
            .expect("a short prompt is fine")
            .settings
            .query_prefix,
        "query: "
    );
    let configured = LocalConfig {
        passage_prefix: Some("p".repeat(5000)),
        ..config.clone()
    };
    let message = model_error(ModelFolder::read(&configured));
    assert_names(&message, &dir, "the configured passage prefix");
    assert!(message.contains("limit of 4096 bytes"), "{message}");

    // Files far over their bounds (sparse: they take no disk) are refused from their size; the
    // weights' bound is what the model config.json describes can hold.
    for (name, size) in [
        ("config.json", 256u64 << 20),
        ("tokenizer.json", 64 << 20),
        ("model.safetensors", 1 << 30),
    ] {
        let (_temp, dir) = synthetic_folder("sparse");
        fs::remove_file(dir.join(name)).expect("unlink");
        fs::File::create(dir.join(name))
            .and_then(|file| file.set_len(size))
            .expect("a sparse file");
        let message = model_error(embed::fingerprint(&ModelConfig::Local(local(&dir)), &[]));
        assert_names(&message, &dir, name);
        assert!(message.contains("over the limit of"), "{message}");
    }
}

#[test]
fn model_errors_print_one_message_whatever_rust_backtrace_says() {
    let Some(source) = minilm() else { return };
    let (_temp, dir) = linked_folder(&source, "mismatched");
    // Weights of another shape than config.json says: candle's error, which carries a
    // backtrace when RUST_BACKTRACE asks for one.
    fs::remove_file(dir.join("config.json")).expect("unlink");
    fs::write(dir.join("config.json"), bert_config(768).to_string()).expect("config");
    let env = crate::support::Env::sample();
    let output = env
        .command(&[
            "ingest",
            env.docs.to_str().expect("utf-8"),
            "--embed-model",
            dir.to_str().expect("utf-8"),
        ])
        .env("RUST_BACKTRACE", "full")
        .env("RUST_LIB_BACKTRACE", "1")
        .output()
        .expect("run groundidx");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("does not hold the BERT weights config.json describes"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("candle_core::") && !stderr.contains("\n   0: "),
        "the error carries a backtrace: {stderr}"
    );
}

#[test]
fn a_prefix_that_leaves_no_room_for_the_text_is_refused() {
    let Some(source) = minilm() else { return };
    let (_temp, dir) = linked_folder(&source, "long-prefix");
    // Under the byte limit, but over the 256 tokens a text is cut to: every passage would be
    // embedded as the prefix alone.
    let config = LocalConfig {
        passage_prefix: Some("passage ".repeat(300)),
        ..local(&dir)
    };
    let message = model_error(LocalModel::load(&config));
    assert_names(&message, &dir, "the passage prefix takes");
    assert!(message.contains("of the 256 tokens"), "{message}");
}
