//! Identifiers, file names and titles in lexical search: an agent names a document by its
//! number or its file name, and code by its identifiers, and finds it first.
//!
//! The EIP-like documents below cite each other's numbers (several times, in short bodies, as
//! the real ones do), while each proposal's own body says "this EIP": a search of the text
//! alone ranks the citing documents first, and only the file name and the `eip` field put the
//! document itself on top.

use std::path::Path;

use serde_json::Value;

use crate::support::{self, Env, assert_success, clean_export};

/// `(file, text)` of a dozen EIP-like documents.
const EIPS: &[(&str, &str)] = &[
    (
        "EIPS/eip-1559.md",
        "---\neip: 1559\ntitle: Fee market change for ETH 1.0 chain\nauthor: Vitalik Buterin (@vbuterin), Eric Conner (@econoar), Rick Dudley (@AFDudley)\ndiscussions-to: https://ethereum-magicians.org/t/eip-1559-fee-market-change-for-eth-1-0-chain/2783\nstatus: Final\ntype: Standards Track\ncategory: Core\ncreated: 2019-04-13\nrequires: 2718, 2930\n---\n\n## Abstract\n\nA transaction pricing mechanism that includes fixed-per-block network fee that is burned and dynamically expands/contracts block sizes to deal with transient congestion.\n\n## Specification\n\nBlock validity is defined in the reference implementation below. The base fee per gas moves up when blocks are above the gas target and down when they are below it. This EIP introduces a new typed transaction with a priority fee and a max fee.\n\n## Rationale\n\nThis EIP makes fees predictable for wallets.\n",
    ),
    (
        "EIPS/eip-3198.md",
        "---\neip: 3198\ntitle: BASEFEE opcode\nauthor: Abdelhamid Bakhta (@abdelhamidbakhta), Vitalik Buterin (@vbuterin)\nstatus: Final\ntype: Standards Track\ncategory: Core\ncreated: 2021-01-13\nrequires: 1559\n---\n\n## Abstract\n\nAdds an opcode that gives the EIP-1559 base fee. EIP-1559 contracts can read it; eip1559 fee logic moves on chain. Thanks to Eric Conner for the review of EIP 1559 pricing.\n",
    ),
    (
        "EIPS/eip-3529.md",
        "---\neip: 3529\ntitle: Reduction in refunds\nauthor: Vitalik Buterin (@vbuterin), Martin Swende (@holiman)\nstatus: Final\ntype: Standards Track\ncategory: Core\ncreated: 2021-04-22\n---\n\n## Motivation\n\nRefunds make EIP-1559 blocks swing: with EIP-1559 the gas target is 1559 based, and refunds above it undo EIP-1559 smoothing.\n",
    ),
    (
        "EIPS/eip-2718.md",
        "---\neip: 2718\ntitle: Typed Transaction Envelope\nauthor: Micah Zoltu (@MicahZoltu)\nstatus: Final\ntype: Standards Track\ncategory: Core\ncreated: 2020-06-13\n---\n\n## Abstract\n\nDefines a new transaction type that is an envelope for future transaction types, such as the EIP-1559 and EIP-2930 ones.\n",
    ),
    (
        "EIPS/eip-2930.md",
        "---\neip: 2930\ntitle: Optional access lists\nauthor: Vitalik Buterin (@vbuterin), Martin Swende (@holiman)\nstatus: Final\ntype: Standards Track\ncategory: Core\ncreated: 2020-08-29\nrequires: 2718, 2929\n---\n\n## Abstract\n\nAdds a transaction type which contains an access list. EIP-1559 transactions carry one too, and EIP-4844 blob transactions as well.\n",
    ),
    (
        "EIPS/eip-4844.md",
        "---\neip: 4844\ntitle: Shard Blob Transactions\nauthor: Vitalik Buterin (@vbuterin), Dankrad Feist (@dankrad), Diederik Loerakker (@protolambda)\nstatus: Final\ntype: Standards Track\ncategory: Core\ncreated: 2022-02-25\nrequires: 1559, 2718, 2930, 4895\n---\n\n## Abstract\n\nIntroduce a new transaction format for blob-carrying transactions which contain a large amount of data that cannot be accessed by EVM execution. This EIP is a step towards full sharding, with a separate fee market for blobs modelled on the one of EIP-1559.\n",
    ),
    (
        "EIPS/eip-7516.md",
        "---\neip: 7516\ntitle: BLOBBASEFEE opcode\nauthor: Carl Beekhuizen (@carlbeek)\nstatus: Final\ntype: Standards Track\ncategory: Core\ncreated: 2023-09-11\nrequires: 3198, 4844\n---\n\n## Abstract\n\nAn opcode that returns the EIP-4844 blob base fee. EIP-4844 blobs are priced apart; with EIP-4844 in place, contracts can read it, as EIP 4844 rollups need.\n",
    ),
    (
        "EIPS/eip-7251.md",
        "---\neip: 7251\ntitle: Increase the MAX_EFFECTIVE_BALANCE\nauthor: mike (@michaelneuder), Francesco (@fradamt)\nstatus: Review\ntype: Standards Track\ncategory: Core\ncreated: 2023-06-28\n---\n\n## Abstract\n\nIncreases the constant MAX_EFFECTIVE_BALANCE while keeping the minimum staking balance `32 ETH`. Validators consolidate.\n",
    ),
    (
        "EIPS/eip-7702.md",
        "---\neip: 7702\ntitle: Set Code for EOAs\nauthor: Vitalik Buterin (@vbuterin), Sam Wilson (@SamWilsn)\nstatus: Final\ntype: Standards Track\ncategory: Core\ncreated: 2024-05-07\nrequires: 2718, 2929, 2930, 3541, 3607, 4337\n---\n\n## Motivation\n\nERC-4337 wallets can delegate. ERC-4337 bundlers, ERC-4337 paymasters and erc4337 entry points all work with it; this is the ERC 4337 path forward.\n",
    ),
    (
        "ERCS/erc-4337.md",
        "---\neip: 4337\ntitle: Account Abstraction Using Alt Mempool\nauthor: Vitalik Buterin (@vbuterin), Yoav Weiss (@yoavw)\nstatus: Final\ntype: Standards Track\ncategory: ERC\ncreated: 2021-09-29\n---\n\n## Abstract\n\nAn account abstraction proposal which completely avoids the need for consensus-layer protocol changes. It introduces a higher-layer pseudo-transaction object called a UserOperation, sent to a separate mempool and bundled into an entry point contract.\n",
    ),
    (
        "ERCS/erc-721.md",
        "---\neip: 721\ntitle: Non-Fungible Token Standard\nauthor: William Entriken (@fulldecent), Dieter Shirley <dete@axiomzen.co>, Jacob Evans, Nastassia Sachs\nstatus: Final\ntype: Standards Track\ncategory: ERC\ncreated: 2018-01-24\nrequires: 165\n---\n\n## Specification\n\nA wallet calls safeTransferFrom, and the receiving contract must implement onERC721Received or the transfer reverts.\n",
    ),
    (
        "ERCS/erc-20.md",
        "---\neip: 20\ntitle: Token Standard\nauthor: Fabian Vogelsteller <fabian@ethereum.org>, Vitalik Buterin <vitalik.buterin@ethereum.org>\nstatus: Final\ntype: Standards Track\ncategory: ERC\ncreated: 2015-11-19\n---\n\n## Specification\n\nTokens move with transfer and transferFrom; ERC-721 tokens use safe transfers instead, and receivers of ERC-721 answer a received hook.\n",
    ),
    (
        "clients/geth-v2.3.1.md",
        "# Release notes\n\nThis release adds the --directory flag: `geth --directory DIR` keeps the chain data in DIR. Upgrade from the previous version with care.\n",
    ),
];

fn eips() -> Env {
    eips_with(&[])
}

/// The EIP-like documents and `extra` ones, ingested.
fn eips_with(extra: &[(&str, &str)]) -> Env {
    let env = Env::empty();
    for (path, text) in EIPS.iter().chain(extra) {
        env.write(path, text);
    }
    env.ingest();
    env
}

/// A proposal whose file name does not hold its number: only its `eip` field does.
const UNNUMBERED: (&str, &str) = (
    "EIPS/account-abstraction.md",
    "---\neip: 4338\ntitle: Account abstraction, again\nstatus: Draft\n---\n\nA draft that moves the entry point into the protocol.\n",
);

/// The first path of every hit, best first.
fn paths(hits: &Value) -> Vec<String> {
    hits["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|hit| hit["paths"][0].as_str().expect("a path").to_string())
        .collect()
}

fn assert_first(env: &Env, query: &str, expected: &str) {
    let found = paths(&env.search(query, 10));
    assert_eq!(
        found.first().map(String::as_str),
        Some(expected),
        "{query:?} found {found:?}"
    );
}

#[test]
fn every_form_of_a_number_finds_its_own_document_first() {
    let env = eips();
    // The trap is real: the documents that cite the number are hits too.
    let cited = paths(&env.search("EIP-1559", 10));
    assert!(cited.contains(&"EIPS/eip-3198.md".to_string()), "{cited:?}");
    assert!(cited.contains(&"EIPS/eip-3529.md".to_string()), "{cited:?}");
    for query in ["EIP-1559", "eip 1559", "eip1559", "1559", "eip-1559.md"] {
        assert_first(&env, query, "EIPS/eip-1559.md");
    }
    for query in ["ERC-4337", "erc4337", "ERC 4337", "4337"] {
        assert_first(&env, query, "ERCS/erc-4337.md");
    }
    for query in ["EIP-4844", "eip4844", "4844"] {
        assert_first(&env, query, "EIPS/eip-4844.md");
    }
    assert_first(&env, "ERC-721", "ERCS/erc-721.md");
}

#[test]
fn identifiers_match_whole_and_in_parts() {
    let env = eips();
    for (query, expected) in [
        ("MAX_EFFECTIVE_BALANCE", "EIPS/eip-7251.md"),
        ("max effective balance", "EIPS/eip-7251.md"),
        ("\"effective balance\"", "EIPS/eip-7251.md"),
        ("onERC721Received", "ERCS/erc-721.md"),
        ("on_erc721_received", "ERCS/erc-721.md"),
        ("safeTransferFrom", "ERCS/erc-721.md"),
        ("\"safe transfer from\"", "ERCS/erc-721.md"),
        ("v2.3.1", "clients/geth-v2.3.1.md"),
        ("2.3.1", "clients/geth-v2.3.1.md"),
    ] {
        assert_first(&env, query, expected);
    }
    // A query that begins with dashes is an argument, not a flag, after `--`.
    let found = paths(&env.json(&["search", "--json", "--top-k", "10", "--", "--directory"]));
    assert_eq!(
        found.first().map(String::as_str),
        Some("clients/geth-v2.3.1.md"),
        "{found:?}"
    );
    // A part alone is a word of its own: `transferFrom` in the ERC-20 text is found by its
    // parts, and the whole does not leak into other words.
    let found = paths(&env.search("transferFrom", 10));
    assert_eq!(
        found.first().map(String::as_str),
        Some("ERCS/erc-20.md"),
        "{found:?}"
    );
}

#[test]
fn an_author_is_found_through_the_text_only() {
    let env = eips();
    let found = paths(&env.search("Conner", 10));
    // eip-3198 thanks him in its text; eip-1559 names him only in `author:`.
    assert!(found.contains(&"EIPS/eip-3198.md".to_string()), "{found:?}");
    assert!(
        !found.contains(&"EIPS/eip-1559.md".to_string()),
        "{found:?}"
    );
}

#[test]
fn id_fields_decide_what_is_searchable_after_rebuild() {
    let env = eips();
    let config = env.tmp.path().join("groundidx.toml");
    std::fs::write(&config, "id_fields = [\"eip\", \"author\"]\n").expect("write config");
    let config = config.to_str().expect("utf-8 temp path");
    let rebuilt = env.run(&["--config", config, "rebuild", "--json"]);
    assert_success(&rebuilt, &["rebuild"]);
    // A label is named by a run of its parts: a full name in `author:` now names its document.
    let found = paths(&env.search("Eric Conner", 10));
    assert!(found.contains(&"EIPS/eip-1559.md".to_string()), "{found:?}");
    // Without `eip` in the list, only the file name names the document: still first, through
    // the name alone; a number no file name holds is then found through the text only.
    let rebuilt = env.run(&["rebuild", "--id-fields", "author", "--json"]);
    assert_success(&rebuilt, &["rebuild"]);
    env.write(UNNUMBERED.0, UNNUMBERED.1);
    let docs = env.docs.to_str().expect("utf-8 temp path");
    let ingested = env.run(&["ingest", docs, "--id-fields", "author", "--json"]);
    assert_success(&ingested, &["ingest"]);
    let found = paths(&env.search("4338", 10));
    assert!(found.is_empty(), "{found:?}");
    let rebuilt = env.run(&["rebuild", "--json"]);
    assert_success(&rebuilt, &["rebuild"]);
    assert_first(&env, "4338", UNNUMBERED.0);
    env.assert_verified();
}

#[test]
fn a_rename_reindexes_under_the_new_name_only() {
    let env = Env::empty();
    env.write(
        "runbooks/zephyr.md",
        "# Restarting the queue\n\nDrain the workers, then restart the broker.\n",
    );
    env.write(
        "runbooks/broker.md",
        "# The broker\n\nThe broker keeps messages until the workers acknowledge them.\n",
    );
    env.ingest();
    assert_first(&env, "zephyr", "runbooks/zephyr.md");
    std::fs::rename(
        env.docs.join("runbooks/zephyr.md"),
        env.docs.join("runbooks/quasar.md"),
    )
    .expect("rename");
    let report = env.ingest();
    assert_eq!(report["documents"]["renamed"], 1, "{report}");
    assert_eq!(report["chunks"]["added"], 0, "{report}");
    assert_eq!(report["chunks"]["removed"], 0, "{report}");
    assert!(
        report["chunks"]["reindexed"].as_u64().expect("reindexed") > 0,
        "{report}"
    );
    assert_first(&env, "quasar", "runbooks/quasar.md");
    assert_eq!(paths(&env.search("zephyr", 10)), Vec::<String>::new());
    env.assert_verified();
    assert_eq!(env.export(), clean_export(&env.docs));
    // A move that keeps the file name changes no label: nothing to write again.
    std::fs::create_dir_all(env.docs.join("archive")).expect("mkdir");
    std::fs::rename(
        env.docs.join("runbooks/quasar.md"),
        env.docs.join("archive/quasar.md"),
    )
    .expect("move");
    let report = env.ingest();
    assert_eq!(report["chunks"]["reindexed"], 0, "{report}");
    // The ledger alone makes the same index.
    assert_success(&env.run(&["rebuild"]), &["rebuild"]);
    assert_first(&env, "quasar", "archive/quasar.md");
    assert_eq!(paths(&env.search("zephyr", 10)), Vec::<String>::new());
}

#[test]
fn a_store_without_fields_fills_them_when_its_files_are_read_again() {
    let env = eips_with(&[UNNUMBERED]);
    assert_first(&env, "4338", UNNUMBERED.0);
    // What a store of schema version 2 looks like after the upgrade: no fields, ctime 0.
    {
        let ledger =
            rusqlite::Connection::open(env.store.join("ledger.sqlite")).expect("open ledger");
        ledger
            .execute_batch("UPDATE documents SET fields = NULL; UPDATE sources SET ctime_ns = 0;")
            .expect("forget fields");
    }
    assert_success(&env.run(&["rebuild"]), &["rebuild"]);
    assert_eq!(paths(&env.search("4338", 10)), Vec::<String>::new());
    let report = env.ingest();
    assert_eq!(report["chunks"]["added"], 0, "{report}");
    assert!(
        report["chunks"]["reindexed"].as_u64().expect("reindexed") > 0,
        "{report}"
    );
    assert_first(&env, "4338", UNNUMBERED.0);
    env.assert_verified();
    // Filled once: the next run reads nothing again.
    let report = env.ingest();
    assert_eq!(report["chunks"]["reindexed"], 0, "{report}");
}

fn tldr() -> Option<Env> {
    let corpus = support::corpus("tldr-en")?;
    let env = Env::empty();
    let docs = corpus.to_str().expect("utf-8 corpus path");
    assert_success(&env.run(&["ingest", docs, "--json"]), &["ingest"]);
    Some(env)
}

fn is_tar(path: &str) -> bool {
    Path::new(path)
        .file_name()
        .is_some_and(|name| name == "tar.md")
}

#[test]
fn tldr_tar_is_found_by_its_name() {
    let Some(env) = tldr() else { return };
    let found = paths(&env.search("tar", 10));
    assert!(found.first().is_some_and(|path| is_tar(path)), "{found:?}");
    let found = paths(&env.search("extract a tar archive", 10));
    assert!(found.iter().take(3).any(|path| is_tar(path)), "{found:?}");
}

/// The EIP-like documents ingested with the real local model, when it is there.
fn eips_embedded() -> Option<Env> {
    let model = crate::support::embed_server::model_dir()?;
    let env = Env::empty();
    for (path, text) in EIPS {
        env.write(path, text);
    }
    let docs = env.docs.to_str().expect("utf-8").to_string();
    let model = model.to_str().expect("utf-8").to_string();
    let report = env.json(&["ingest", &docs, "--json", "--embed-model", &model]);
    assert_eq!(
        report["embedding"]["embedded"], report["embedding"]["chunks"],
        "{report}"
    );
    Some(env)
}

#[test]
fn a_document_named_exactly_comes_first_in_every_mode() {
    let Some(env) = eips_embedded() else { return };
    let named = [
        ("EIP-1559", "EIPS/eip-1559.md"),
        ("ERC-4337", "ERCS/erc-4337.md"),
        ("erc4337", "ERCS/erc-4337.md"),
        ("eip 4844", "EIPS/eip-4844.md"),
        ("what does EIP-7702 change", "EIPS/eip-7702.md"),
        // A title, and a title in other case and spelling.
        ("Shard Blob Transactions", "EIPS/eip-4844.md"),
        ("set code for EOAs", "EIPS/eip-7702.md"),
        // A title that differs from another's ("BASEFEE opcode") by one word's part.
        ("BLOBBASEFEE opcode", "EIPS/eip-7516.md"),
        ("basefee opcode", "EIPS/eip-3198.md"),
    ];
    for mode in ["lexical", "semantic", "hybrid"] {
        for (query, expected) in named {
            let answer = env.json(&["search", query, "--json", "--mode", mode]);
            assert_eq!(answer["mode"], mode, "{answer}");
            let first = &answer["hits"][0];
            assert_eq!(
                first["paths"][0],
                expected,
                "{mode} {query:?}: {:?}",
                paths(&answer)
            );
            assert_eq!(first["exact_match"], true, "{mode} {query:?}: {first}");
            // One passage per named document: the next hit is another document's, or no
            // exact match.
            let rest: Vec<&Value> = answer["hits"].as_array().expect("hits")[1..]
                .iter()
                .filter(|hit| hit["exact_match"] == true)
                .collect();
            assert!(
                rest.iter().all(|hit| hit["paths"][0] != expected),
                "{mode} {query:?}: {answer}"
            );
        }
        // A question that names no document exactly marks no hit.
        let answer = env.json(&[
            "search",
            "how are transaction fees priced",
            "--json",
            "--mode",
            mode,
        ]);
        assert!(
            answer["hits"]
                .as_array()
                .expect("hits")
                .iter()
                .all(|hit| hit.get("exact_match").is_none()),
            "{mode}: {answer}"
        );
    }
}
