//! Query text to a Tantivy query. It cannot fail: there is no syntax to get wrong.
//!
//! The text goes through the same analyzer as the index (`index::tokenizer`: identifier-aware
//! words, whole and in parts, lower case, English stemmer). Every token becomes a SHOULD term
//! over the body (heading path and text) and over the heading path alone (boosted). The labels
//! of the chunk's documents (file name stems, titles, identifier fields) are indexed as terms of
//! whole runs of their parts (`tokenizer::label_terms`: the whole label, its runs of two parts
//! or more, its parts that hold a digit), and every run of up to `MAX_LABEL_PARTS` consecutive
//! parts of the query is a SHOULD term over each label field, weighted by its length. So
//! `EIP-1559`, `eip 1559`, `eip1559` and `1559` all name `eip-1559.md` and `v2.3.1` names
//! `geth-v2.3.1.md`, while a question's `why` names no document called `why-kubernetes-and-eks`.
//! A single stop word is no label term in a query of several words ("which program…" does
//! not name `which.md`). Every
//! "quoted phrase" of two or more positions adds a SHOULD phrase clause over the body that
//! rewards the exact sequence of parts (a word's whole shares its first part's position and
//! is left out of it), so quotes help without being required. Scoring is BM25. Characters that other
//! query languages treat as operators (`+ - : ( ) AND OR`) are plain text here: an agent's query
//! never fails and never silently excludes a word.

use tantivy::Index;
use tantivy::Term;
use tantivy::query::{
    BooleanQuery, BoostQuery, ConstScoreQuery, EmptyQuery, Occur, PhraseQuery, Query, TermQuery,
};
use tantivy::schema::{Field, IndexRecordOption};
use tantivy::tokenizer::TokenStream;

use crate::index::tokenizer::MAX_LABEL_PARTS;
use crate::index::{Fields, QueryConfig};

/// The most query tokens used, over all the query's parts; longer queries keep their first
/// tokens, and the rest of the text is not even read, so a query's cost is bounded whatever its
/// length (`"a b"` repeated a million times is one million phrases otherwise).
const MAX_TOKENS: usize = 1_024;

/// The query parts whose runs are matched against labels: the first 64.
const MAX_LABEL_QUERY_PARTS: usize = 64;

/// Builds the query for `text`. A query with no tokens matches nothing. A label clause is
/// built only for a term `holds` says the index may hold: one it lacks scores nothing, and its
/// weight cost as much as one it holds (a query has a clause for every run of its parts in
/// each label field, and few name anything).
pub(crate) fn build(
    index: &Index,
    fields: &Fields,
    text: &str,
    config: &QueryConfig,
    holds: &dyn Fn(&Term) -> bool,
) -> Box<dyn Query> {
    let text_field = fields.body;
    let labels = [
        (fields.names, config.name_boost),
        (fields.titles, config.title_boost),
        (fields.ids, config.id_boost),
    ];
    let Ok(mut analyzer) = index.tokenizer_for_field(text_field) else {
        return Box::new(EmptyQuery);
    };
    let mut budget = MAX_TOKENS;
    let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
    // A stop word earns no score of its own when the query has words that carry meaning: "the"
    // is in nearly every chunk, and a long question's stop words filled the tail of the ranking
    // and the fusion's anchor with chunks that share nothing else with it. A query of stop words alone ("to be or not to be") keeps
    // them, and quoted phrases keep them in place.
    let stop = super::tokenizer::stop_words();
    let skip_stop_words = query_words(text) > 0;
    // Odd-numbered parts of a split on '"' are the quoted phrases.
    for (i, part) in text.split('"').enumerate() {
        if budget == 0 {
            break;
        }
        let mut tokens: Vec<(usize, String)> = Vec::new();
        let mut stream = analyzer.token_stream(part);
        while tokens.len() < budget && stream.advance() {
            let token = stream.token();
            tokens.push((token.position, token.text.clone()));
        }
        budget -= tokens.len();
        for (_, token) in &tokens {
            if skip_stop_words && stop.contains(token) {
                continue;
            }
            clauses.push((Occur::Should, term(text_field, token)));
            if config.heading_boost > 0.0 {
                clauses.push((
                    Occur::Should,
                    Box::new(BoostQuery::new(
                        term(fields.heading, token),
                        config.heading_boost,
                    )),
                ));
            }
        }
        if i % 2 == 1 {
            // One term per position, the last one there: a word's part, not its whole.
            let mut terms: Vec<(usize, Term)> = Vec::new();
            for (position, token) in &tokens {
                let term = Term::from_field_text(text_field, token);
                match terms.last_mut() {
                    Some((last, slot)) if *last == *position => *slot = term,
                    _ => terms.push((*position, term)),
                }
            }
            if terms.len() > 1 {
                let first = terms[0].0;
                let terms = terms
                    .into_iter()
                    .map(|(position, term)| (position - first, term))
                    .collect();
                clauses.push((Occur::Should, Box::new(PhraseQuery::new_with_offset(terms))));
            }
        }
    }
    let (keys, words) = label_keys(&mut analyzer, text);
    // A query of one or two words may be a name; in a longer one (a question) a label it
    // happens to contain is weaker evidence than its words in the text: the weight fades as 2/words.
    let fade = (2.0 / words.max(1) as f32).min(1.0_f32);
    for (key, n_parts) in keys {
        // A run of n parts weighs what the n + 1 tokens of a word of n parts (its whole and
        // its parts) weigh in the text: a longer name is the more certain one.
        let weight = fade * if n_parts > 1 { n_parts + 1 } else { 1 } as f32;
        for (field, boost) in labels {
            let term = Term::from_field_text(field, &key);
            if boost > 0.0 && holds(&term) {
                clauses.push((
                    Occur::Should,
                    Box::new(BoostQuery::new(
                        Box::new(TermQuery::new(term, IndexRecordOption::Basic)),
                        boost * weight,
                    )),
                ));
            }
        }
    }
    if clauses.is_empty() {
        return Box::new(EmptyQuery);
    }
    Box::new(BooleanQuery::new(clauses))
}

/// The keys by which a query names a label exactly (`tokenizer::whole_label`): the whole query,
/// and each run of its parts that holds both a word and a number and neither begins nor ends
/// with a stop word (`EIP 7702` in "what does EIP-7702 change"). A plain word inside a longer
/// query is never one: "list the files" does not name `list.md`, while `list` alone does.
pub(crate) fn whole_label_keys(
    analyzer: &mut tantivy::tokenizer::TextAnalyzer,
    text: &str,
) -> Vec<String> {
    let head: String = text.chars().take(MAX_LABEL_QUERY_PARTS * 48).collect();
    let head = head.replace('"', " ");
    let mut keys: Vec<String> = super::tokenizer::whole_label(analyzer, &head)
        .into_iter()
        .collect();
    let mut parts = super::tokenizer::parts_in_order(analyzer, &head);
    parts.truncate(MAX_LABEL_QUERY_PARTS);
    let stop = super::tokenizer::stop_words();
    let number = |part: &String| part.bytes().any(|b| b.is_ascii_digit());
    let word = |part: &String| part.chars().any(char::is_alphabetic);
    for start in 0..parts.len() {
        for end in start + 2..=(start + MAX_LABEL_PARTS).min(parts.len()) {
            let run = &parts[start..end];
            if stop.contains(&run[0]) || stop.contains(&run[run.len() - 1]) {
                continue;
            }
            if !(run.iter().any(number) && run.iter().any(word)) {
                continue;
            }
            let key = run.join(" ");
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
    }
    keys
}

/// The query for the chunks whose documents a query names exactly (`whole_label_keys`), scored
/// by the words of the query alone (`build`), so the best passage of such a document comes
/// first among them. `None` when the query names nothing, or no label `holds` says the index
/// holds.
pub(crate) fn build_named(
    index: &Index,
    fields: &Fields,
    text: &str,
    config: &QueryConfig,
    holds: &dyn Fn(&Term) -> bool,
) -> Option<Box<dyn Query>> {
    let whole_labels = fields.whole_labels?;
    let mut analyzer = index.tokenizer_for_field(fields.body).ok()?;
    let keys = whole_label_keys(&mut analyzer, text);
    // A query that names no label the index holds matches nothing: the full query below, whose
    // weights cost as much as the search itself, is not built for it.
    if !keys
        .iter()
        .any(|key| holds(&Term::from_field_text(whole_labels, key)))
    {
        return None;
    }
    let named: Vec<(Occur, Box<dyn Query>)> = keys
        .iter()
        .map(|key| -> (Occur, Box<dyn Query>) {
            (
                Occur::Should,
                Box::new(TermQuery::new(
                    Term::from_field_text(whole_labels, key),
                    IndexRecordOption::Basic,
                )),
            )
        })
        .collect();
    Some(Box::new(BooleanQuery::new(vec![
        (
            Occur::Must,
            Box::new(ConstScoreQuery::new(
                Box::new(BooleanQuery::new(named)),
                0.0,
            )),
        ),
        (Occur::Should, build(index, fields, text, config, holds)),
    ])))
}

/// How many words of `text` carry meaning: the pieces between white space that hold a part
/// which is not a stop word, counted up to `MAX_LABEL_QUERY_PARTS`. A name (`tar`,
/// `Get-ChildItem`, `GET _cluster/allocation/explain`) is one or two such words however many
/// parts it splits into; a question is several ("which folders are eating up all my storage":
/// five). Search weighs its two legs by this count.
pub(crate) fn query_words(text: &str) -> usize {
    let mut analyzer = super::tokenizer::analyzer();
    let stop = super::tokenizer::stop_words();
    text.split_whitespace()
        .take(MAX_LABEL_QUERY_PARTS)
        .filter(|word| {
            super::tokenizer::parts_in_order(&mut analyzer, word)
                .iter()
                .any(|part| !stop.contains(part))
        })
        .count()
}

/// The label terms a query can name, each once with its number of parts: every run of up to
/// `MAX_LABEL_PARTS` consecutive parts of its first `MAX_LABEL_QUERY_PARTS` parts (quotes
/// ignored); a run of one stop word is left out when the query has more than one part, and a
/// run of one plain word (no digit) when it has more than three words that are not stop words.
/// Also returns that number of words.
fn label_keys(
    analyzer: &mut tantivy::tokenizer::TextAnalyzer,
    text: &str,
) -> (Vec<(String, usize)>, usize) {
    let head: String = text.chars().take(MAX_LABEL_QUERY_PARTS * 48).collect();
    let mut parts = super::tokenizer::parts_in_order(analyzer, &head.replace('"', " "));
    parts.truncate(MAX_LABEL_QUERY_PARTS);
    let stop: &[String] = if parts.len() > 1 {
        super::tokenizer::stop_words()
    } else {
        &[]
    };
    // In a query of more than three words, one plain word names no label: a question's `find`
    // or `file` is evidence for the text, not a page called so. A number still does.
    let words = parts.iter().filter(|part| !stop.contains(part)).count();
    let mut keys: Vec<(String, usize)> = Vec::new();
    for start in 0..parts.len() {
        for end in start + 1..=(start + MAX_LABEL_PARTS).min(parts.len()) {
            let single = &parts[start];
            if end == start + 1
                && (stop.contains(single)
                    || (words > 3 && !single.bytes().any(|b| b.is_ascii_digit())))
            {
                continue;
            }
            let key = parts[start..end].join(" ");
            if !keys.iter().any(|(known, _)| *known == key) {
                keys.push((key, end - start));
            }
        }
    }
    (keys, words)
}

fn term(field: Field, token: &str) -> Box<dyn Query> {
    Box::new(TermQuery::new(
        Term::from_field_text(field, token),
        IndexRecordOption::WithFreqs,
    ))
}

#[cfg(test)]
mod tests {
    use tantivy::query::BooleanQuery;

    use super::{
        MAX_LABEL_QUERY_PARTS, MAX_TOKENS, build, label_keys, query_words, whole_label_keys,
    };
    use crate::index::tokenizer::{self, MAX_LABEL_PARTS, label_terms};
    use crate::index::{QueryConfig, ram_index};

    /// Clauses per token: the body and the heading path.
    const PER_TOKEN: usize = 2;
    /// Clauses per label key: names, titles, identifiers.
    const PER_KEY: usize = 3;

    /// The number of clauses the query for `text` has.
    fn clauses(text: &str) -> usize {
        let (index, fields) = ram_index();
        let query = build(&index, &fields, text, &QueryConfig::default(), &|_| true);
        query
            .downcast_ref::<BooleanQuery>()
            .map_or(0, |query| query.clauses().len())
    }

    /// Whether `query` names `label`: one of its runs is one of the label's terms.
    fn names(query: &str, label: &str) -> bool {
        let mut analyzer = tokenizer::analyzer();
        let terms = label_terms(&mut analyzer, label);
        label_keys(&mut analyzer, query)
            .0
            .iter()
            .any(|(key, _)| terms.contains(key))
    }

    #[test]
    fn a_query_has_at_most_its_token_budget_of_clauses() {
        // key, rotat; label keys "key", "key rotat", "rotat".
        assert_eq!(clauses("key rotation"), 2 * PER_TOKEN + 3 * PER_KEY);
        assert_eq!(clauses("\"key rotation\""), 2 * PER_TOKEN + 3 * PER_KEY + 1);
        // A word of two parts is three tokens at two positions: still one phrase. Six label
        // keys: every run of eip, 1559, fee.
        assert_eq!(clauses("\"eip-1559 fee\""), 4 * PER_TOKEN + 6 * PER_KEY + 1);
        // Four words: of the single parts only the number is a label key (10 runs, 3 plain).
        assert_eq!(clauses("eip-1559 fee market"), 5 * PER_TOKEN + 7 * PER_KEY);
        let bound = PER_TOKEN * MAX_TOKENS
            + MAX_TOKENS / 2
            + PER_KEY * MAX_LABEL_QUERY_PARTS * MAX_LABEL_PARTS;
        for text in [
            "\"a b\" ".repeat(100_000),
            "word ".repeat(100_000),
            "\"".repeat(100_000),
            "\"a b c d e f g h\" x ".repeat(10_000),
        ] {
            let n = clauses(&text);
            assert!(n <= bound, "{n} clauses from {} bytes", text.len());
        }
    }

    #[test]
    fn a_label_is_named_by_any_spelling_of_a_run_of_its_parts() {
        for query in [
            "EIP-1559",
            "eip 1559",
            "eip1559",
            "1559",
            "what changed in EIP-1559?",
        ] {
            assert!(names(query, "eip-1559"), "{query}");
        }
        assert!(names("v2.3.1", "geth-v2.3.1"));
        assert!(names("tar archive", "tar"));
        assert!(names("extract a tar archive", "tar"));
        assert!(names("tar", "tar"));
        assert!(names("MAX_EFFECTIVE_BALANCE", "max-effective-balance"));
        assert!(names("cluster health", "Cluster health"));
        assert!(!names("eip", "eip-1559"), "one plain word of a longer name");
    }

    /// Whether `query` names `label` exactly (`whole_label_keys` against `whole_label`).
    fn names_exactly(query: &str, label: &str) -> bool {
        let mut analyzer = tokenizer::analyzer();
        let whole = tokenizer::whole_label(&mut analyzer, label).expect("a label with words");
        whole_label_keys(&mut analyzer, query).contains(&whole)
    }

    #[test]
    fn a_query_names_a_label_exactly_by_all_of_it_or_by_a_cited_identifier() {
        for (query, label) in [
            ("EIP-1559", "eip-1559"),
            ("eip 1559", "eip-1559"),
            ("eip1559", "eip-1559"),
            ("what does EIP-7702 change", "eip-7702"),
            ("compare ERC-20 and ERC-721", "erc-721"),
            ("compare ERC-20 and ERC-721", "erc-20"),
            ("tar", "tar"),
            ("git rebase", "git-rebase"),
            ("cluster health", "Cluster health"),
            ("\"Index State Management\"", "Index State Management"),
        ] {
            assert!(names_exactly(query, label), "{query:?} names {label:?}");
        }
        for (query, label) in [
            // A plain word of a longer query is never a name, however short the page's.
            ("list the files", "list"),
            ("extract a tar archive", "tar"),
            ("cluster health", "Cluster"),
            // Part of a name is not the name.
            ("eip", "eip-1559"),
            ("1559", "eip-1559"),
            ("git", "git-rebase"),
            // A number alone, inside a question, names no document whose identifier it is.
            ("keep 2 replicas", "2"),
        ] {
            assert!(
                !names_exactly(query, label),
                "{query:?} must not name {label:?}"
            );
        }
    }

    #[test]
    fn a_question_does_not_name_a_label_by_one_of_its_words() {
        let question = "why does my cluster turn yellow after adding a node";
        assert!(!names(question, "why-kubernetes-and-eks"));
        assert!(!names(question, "why"), "a stop word alone, in a question");
        assert!(!names("which program holds a port", "which"));
        assert!(names("which", "which"));
        assert!(!names(question, "cluster"), "one plain word in a question");
        assert!(names("cluster", "cluster"));
        assert!(names("cluster 2 nodes yellow", "node-2"), "a number does");
        let mut analyzer = tokenizer::analyzer();
        // A label longer than a query run can be is named only by its runs.
        assert!(
            !label_terms(&mut analyzer, "a b c d e f g h i")
                .contains(&"a b c d e f g h i".to_string())
        );
        assert!(!label_terms(&mut analyzer, "to-be-or-not").contains(&"to be".to_string()));
        assert!(!names("adding a node", "adding-a-viz"));
        assert!(names("adding a viz", "adding-a-viz"));
    }

    /// The body texts of `bodies` that the query for `text` matches, best first.
    fn matching(bodies: &[&str], text: &str) -> Vec<String> {
        let (index, fields) = ram_index();
        let mut writer: tantivy::IndexWriter = index.writer(15_000_000).expect("a RAM index");
        for body in bodies {
            let mut document = tantivy::TantivyDocument::default();
            document.add_text(fields.body, body);
            writer.add_document(document).expect("a RAM index");
        }
        writer.commit().expect("a RAM index");
        let searcher = index.reader().expect("a RAM index").searcher();
        let query = build(&index, &fields, text, &QueryConfig::default(), &|_| true);
        let top = searcher
            .search(
                &query,
                &tantivy::collector::TopDocs::with_limit(10).order_by_score(),
            )
            .expect("a RAM index");
        // One commit of one writer: one segment whose document IDs are the order of adding.
        top.into_iter()
            .map(|(_, address)| bodies[address.doc_id as usize].to_string())
            .collect()
    }

    /// A label clause is left out for a term the index does not hold: the query ranks every
    /// document as the query with every clause does, score for score, with fewer clauses.
    #[test]
    fn label_clauses_the_index_cannot_match_are_left_out_and_change_nothing() {
        let (index, fields) = ram_index();
        let mut analyzer = tokenizer::analyzer();
        let mut writer: tantivy::IndexWriter = index.writer(15_000_000).expect("a RAM index");
        let documents = [
            (
                "eip-1559",
                "Fee market change",
                "EIP-1559",
                "base fee burned per block",
            ),
            ("tar", "tar", "", "create a tar archive of files"),
            (
                "cluster-health",
                "Cluster health",
                "",
                "why a cluster turns yellow",
            ),
            (
                "notes",
                "Release notes v2.3.1",
                "",
                "what changed in the release",
            ),
        ];
        for (name, title, id, body) in documents {
            let mut document = tantivy::TantivyDocument::default();
            document.add_text(fields.body, body);
            for (field, label) in [
                (fields.names, name),
                (fields.titles, title),
                (fields.ids, id),
            ] {
                for term in tokenizer::label_terms(&mut analyzer, label) {
                    document.add_text(field, &term);
                }
            }
            writer.add_document(document).expect("a RAM index");
        }
        writer.commit().expect("a RAM index");
        let searcher = index.reader().expect("a RAM index").searcher();
        let holds = |term: &tantivy::Term| searcher.doc_freq(term).is_ok_and(|n| n > 0);
        let config = QueryConfig::default();
        let ranked = |query: &dyn tantivy::query::Query| -> Vec<(u32, String)> {
            searcher
                .search(
                    query,
                    &tantivy::collector::TopDocs::with_limit(10).order_by_score(),
                )
                .expect("a RAM index")
                .into_iter()
                .map(|(score, address)| (address.doc_id, format!("{score:.5}")))
                .collect()
        };
        let count = |query: &dyn tantivy::query::Query| {
            query
                .downcast_ref::<BooleanQuery>()
                .map_or(0, |query| query.clauses().len())
        };
        for text in [
            "EIP-1559",
            "eip 1559 base fee",
            "tar",
            "cluster health yellow",
            "v2.3.1 release",
            "what is a fee market change",
            "nothing here names anything",
        ] {
            let every = build(&index, &fields, text, &config, &|_| true);
            let held = build(&index, &fields, text, &config, &holds);
            assert_eq!(ranked(&*held), ranked(&*every), "{text:?}");
            assert!(
                count(&*held) < count(&*every),
                "{text:?}: no clause was left out"
            );
        }
    }

    #[test]
    fn a_stop_word_earns_no_score_beside_words_that_carry_meaning() {
        let bodies = ["the manual of the shell", "create a tar archive"];
        assert_eq!(
            matching(&bodies, "the tar archive"),
            ["create a tar archive"]
        );
        assert_eq!(
            matching(&bodies, "how to pack the files"),
            Vec::<String>::new()
        );
        // Stop words alone still match, and a quoted phrase still rewards them in place.
        assert_eq!(matching(&bodies, "the"), ["the manual of the shell"]);
        assert_eq!(
            matching(&["to be or not to be", "a play"], "to be or not to be"),
            ["to be or not to be"]
        );
    }

    #[test]
    fn a_name_is_one_or_two_words_that_carry_meaning_however_many_parts() {
        assert_eq!(query_words("tar"), 1);
        assert_eq!(query_words("Get-ChildItem"), 1);
        assert_eq!(query_words("cluster.routing.allocation.enable"), 1);
        assert_eq!(query_words("GET _cluster/allocation/explain"), 2);
        assert_eq!(query_words("git rebase"), 2);
        assert_eq!(query_words("which folders are eating up all my storage"), 5);
        assert_eq!(query_words("to be or not to be"), 0);
        assert_eq!(query_words(""), 0);
    }
}
