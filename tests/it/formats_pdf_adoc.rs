//! PDF and AsciiDoc through the real binary: real PDFs (`pdf-jose-papers`,
//! `pdf-cncf-tag-security`) are found by a phrase on a known page with their path and lines;
//! hostile PDFs written here byte by byte (deep nesting, a double-Flate bomb, a cyclic page
//! tree, a cross-reference table that is its own /Prev, a form that draws itself, an encrypted
//! file, garbage) are each a warning naming the file while the run indexes the rest and its
//! own memory stays bounded (the PDF parser runs in `extract-worker` children); the Spring
//! Security AsciiDoc corpus reads fast with its headings; and the fuzz properties hold on
//! hostile inputs.

use std::io::Write as _;
use std::path::Path;
use std::time::Instant;

use serde_json::Value;

use crate::support::{Env, assert_success, copy_tree, corpus, run_bounded, warnings};

/// Far above what ingesting a few small files takes, far below what the bombs would take
/// in-process.
const RSS_LIMIT_KIB: u64 = 1 << 20;

/// A PDF file of `objects` (object 1 the catalog) with a correct cross-reference table;
/// `{xref}` in `trailer` stands for the table's offset.
pub fn pdf(objects: &[Vec<u8>], trailer: &str) -> Vec<u8> {
    let mut bytes = b"%PDF-1.5\n".to_vec();
    let mut offsets = Vec::new();
    for (index, object) in objects.iter().enumerate() {
        offsets.push(bytes.len());
        bytes.extend_from_slice(format!("{} 0 obj\n", index + 1).as_bytes());
        bytes.extend_from_slice(object);
        bytes.extend_from_slice(b"\nendobj\n");
    }
    let xref = bytes.len();
    bytes.extend_from_slice(
        format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes(),
    );
    for offset in offsets {
        bytes.extend_from_slice(format!("{offset:010} 00000 n \n").as_bytes());
    }
    bytes.extend_from_slice(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R {} >>\nstartxref\n{xref}\n%%EOF\n",
            objects.len() + 1,
            trailer.replace("{xref}", &xref.to_string())
        )
        .as_bytes(),
    );
    bytes
}

pub fn text(object: &str) -> Vec<u8> {
    object.as_bytes().to_vec()
}

pub fn stream(dictionary: &str, content: &[u8]) -> Vec<u8> {
    let mut bytes = format!("<< {dictionary} /Length {} >>\nstream\n", content.len()).into_bytes();
    bytes.extend_from_slice(content);
    bytes.extend_from_slice(b"\nendstream");
    bytes
}

/// A one-page document whose page has `resources` and the content stream object 4; `extra`
/// objects follow from 5.
fn one_page(resources: &str, content: Vec<u8>, extra: Vec<Vec<u8>>) -> Vec<u8> {
    let mut objects = vec![
        text("<< /Type /Catalog /Pages 2 0 R >>"),
        text("<< /Type /Pages /Kids [3 0 R] /Count 1 >>"),
        text(&format!(
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << {resources} >> /Contents 4 0 R >>"
        )),
        content,
    ];
    objects.extend(extra);
    pdf(&objects, "")
}

pub const FONT: &str = "/Font << /F1 << /Type /Font /Subtype /Type1 /BaseFont /Helvetica >> >>";

/// `data` zlib-compressed.
fn zlib(data: impl Fn(&mut dyn FnMut(&[u8]))) -> Vec<u8> {
    let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    data(&mut |chunk| encoder.write_all(chunk).expect("compress"));
    encoder.finish().expect("compress")
}

/// A decompression bomb: 3 GiB of zeros, compressed twice, a few KB that the parser inflates
/// past its memory limit.
fn bomb_pdf() -> Vec<u8> {
    let zeros = vec![0u8; 1 << 20];
    let once = zlib(|write| {
        for _ in 0..3072 {
            write(&zeros);
        }
    });
    let twice = zlib(|write| write(&once));
    assert!(
        twice.len() < 64 << 10,
        "the bomb is small: {} bytes",
        twice.len()
    );
    one_page(
        FONT,
        stream("/Filter [/FlateDecode /FlateDecode]", &twice),
        Vec::new(),
    )
}

/// The other hostile PDFs, by file name.
fn hostile_pdfs() -> Vec<(&'static str, Vec<u8>)> {
    let deep = one_page(
        FONT,
        stream(
            "",
            format!("BT /F1 12 Tf 72 700 Td {} ET", "[".repeat(500_000)).as_bytes(),
        ),
        Vec::new(),
    );
    let cyclic_tree = pdf(
        &[
            text("<< /Type /Catalog /Pages 2 0 R >>"),
            text("<< /Type /Pages /Kids [2 0 R 3 0 R] /Count 1000000000 >>"),
            text("<< /Type /Pages /Parent 2 0 R /Kids [2 0 R 3 0 R] /Count 1000000000 >>"),
        ],
        "",
    );
    // A form that draws itself.
    let self_drawing = one_page(
        &format!("{FONT} /XObject << /X 5 0 R >>"),
        stream("", b"/X Do"),
        vec![stream(
            "/Type /XObject /Subtype /Form /BBox [0 0 612 792] /Resources << /XObject << /X 5 0 R >> >>",
            b"/X Do BT /F1 12 Tf (again) Tj ET",
        )],
    );
    let encrypted = pdf(
        &[
            text("<< /Type /Catalog /Pages 2 0 R >>"),
            text("<< /Type /Pages /Kids [] /Count 0 >>"),
            text(&format!(
                "<< /Filter /Standard /V 1 /R 2 /O <{}> /U <{}> /P -4 >>",
                "ab".repeat(32),
                "cd".repeat(32)
            )),
        ],
        "/Encrypt 3 0 R /ID [<00112233445566778899aabbccddeeff> <00112233445566778899aabbccddeeff>]",
    );
    // A cross-reference table whose /Prev is itself.
    let xref_loop = pdf(
        &[
            text("<< /Type /Catalog /Pages 2 0 R >>"),
            text("<< /Type /Pages /Kids [3 0 R] /Count 1 >>"),
            text("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>"),
        ],
        "/Prev {xref}",
    );
    vec![
        ("xref-loop.pdf", xref_loop),
        ("deep.pdf", deep),
        ("cyclic-tree.pdf", cyclic_tree),
        ("self-drawing.pdf", self_drawing),
        ("encrypted.pdf", encrypted),
        ("garbage.pdf", b"%PDF-1.7\n\x00\xff not really".to_vec()),
    ]
}

/// The first hit of `query`.
fn first_hit(env: &Env, query: &str) -> Value {
    let found = env.search(query, 3);
    found["hits"][0].clone()
}

#[test]
fn real_pdfs_are_found_at_their_page_lines() {
    let (Some(jose), Some(cncf)) = (corpus("pdf-jose-papers"), corpus("pdf-cncf-tag-security"))
    else {
        return;
    };
    let env = Env::empty();
    copy_tree(&jose, &env.docs.join("jose"));
    copy_tree(&cncf, &env.docs.join("cncf"));
    let started = Instant::now();
    let report = env.ingest();
    let took = started.elapsed();
    let pdf_warnings: Vec<(String, String)> = warnings(&report);
    eprintln!("54 PDFs ingested in {took:?}; warnings: {pdf_warnings:#?}");
    // Every PDF here is text; none may fail but one whose trailer lopdf cannot parse.
    for (path, message) in &pdf_warnings {
        assert!(
            path.ends_with("whitepaper-cn-Sept2023-v2.pdf")
                && message.contains("not a readable PDF"),
            "{path}: {message}"
        );
    }

    // Page 2 of jose.00013: "… will be listed on the Reproducible Research Tutorial Series
    // Honor Roll …".
    let hit = first_hit(
        &env,
        "Riffomonas Reproducible Research Tutorial Series Honor Roll virtual badge",
    );
    let path = hit["paths"][0].as_str().expect("path");
    assert_eq!(path, "jose/jose.00013/10.21105.jose.00013.pdf", "{hit:#}");
    assert!(
        hit["text"].as_str().expect("text").contains("Honor Roll"),
        "{hit:#}"
    );
    let (first, last) = (
        hit["lines"][0].as_u64().expect("line"),
        hit["lines"][1].as_u64().expect("line"),
    );
    // Lines of a page's text (a page of this paper has about 50). Where hits carry their
    // pages, the passage is on page 2 or runs over it, and its lines are of its first and last
    // page.
    assert!(
        (1..=80).contains(&first) && (1..=80).contains(&last),
        "{hit:#}"
    );
    let pages = hit
        .get("pages")
        .and_then(Value::as_array)
        .map(|pages| (pages[0].as_u64(), pages[1].as_u64()));
    match pages {
        Some((Some(from), Some(to))) => {
            assert!(from <= 2 && 2 <= to, "{hit:#}");
            assert!(from < to || first <= last, "{hit:#}");
        }
        _ => assert!(first <= last, "{hit:#}"),
    }

    let hit = first_hit(
        &env,
        "STRIDE Threat Modeling for OpenMetrics spoofing stealing credentials",
    );
    let path = hit["paths"][0].as_str().expect("path");
    assert!(
        path.ends_with("openmetrics/STRIDE Threat Modeling.pdf"),
        "{hit:#}"
    );
}

#[test]
fn hostile_pdfs_are_warnings_and_the_run_goes_on() {
    let env = Env::empty();
    env.write(
        "good.md",
        "# Good\n\nThe healthy neighbour document survives hostile files.\n",
    );
    let mut pdfs = hostile_pdfs();
    pdfs.push(("bomb.pdf", bomb_pdf()));
    for (name, bytes) in &pdfs {
        std::fs::write(env.docs.join(name), bytes).expect("write pdf");
    }
    let docs = env.docs.to_str().expect("utf-8").to_string();
    let args = ["ingest", docs.as_str(), "--json"];
    let started = Instant::now();
    let (output, peak) = run_bounded(&env, &args, RSS_LIMIT_KIB);
    assert_success(&output, &args);
    eprintln!(
        "hostile PDFs ingested in {:?}, peak {peak} KiB",
        started.elapsed()
    );
    let report: Value = serde_json::from_slice(&output.stdout).expect("json report");
    let found = warnings(&report);
    eprintln!("{found:#?}");
    for (name, _) in &pdfs {
        assert!(
            found.iter().any(|(path, _)| path == name),
            "no warning names {name}: {found:#?}"
        );
    }
    let message = |name: &str| {
        found
            .iter()
            .find(|(path, _)| path == name)
            .map(|(_, message)| message.clone())
            .unwrap_or_default()
    };
    assert!(
        message("bomb.pdf").contains("ran out of its 2048 MiB memory limit"),
        "{}",
        message("bomb.pdf")
    );
    assert_eq!(
        message("encrypted.pdf"),
        "encrypted PDF (a password is needed to read it); skipped"
    );
    assert!(
        message("garbage.pdf").contains("not a readable PDF"),
        "{}",
        message("garbage.pdf")
    );
    assert!(
        message("cyclic-tree.pdf").contains("no pages"),
        "{}",
        message("cyclic-tree.pdf")
    );
    let hit = first_hit(&env, "healthy neighbour document");
    assert_eq!(hit["paths"][0], "good.md");
}

#[test]
fn spring_security_asciidoc_reads_fast_with_its_headings() {
    let Some(spring) = corpus("adoc-spring-security-docs") else {
        return;
    };
    let env = Env::copy_of(&spring);
    let started = Instant::now();
    let report = env.ingest();
    eprintln!("196 AsciiDoc files ingested in {:?}", started.elapsed());
    assert!(warnings(&report).is_empty(), "{:#?}", warnings(&report));
    // pages/servlet/authentication/passwords/in-memory.adoc: "= In-Memory Authentication".
    let hit = first_hit(&env, "InMemoryUserDetailsManager in-memory authentication");
    let heading = hit["heading"].as_str().expect("heading");
    assert!(
        hit["paths"][0].as_str().expect("path").ends_with(".adoc"),
        "{hit:#}"
    );
    assert!(!heading.is_empty() && !heading.contains("=="), "{hit:#}");
    assert!(
        !hit["text"]
            .as_str()
            .expect("text")
            .contains("include-code::"),
        "{hit:#}"
    );
}

/// Hostile inputs for the fuzz properties (the fuzz targets' own functions), so they run in
/// every test run, not only under `cargo fuzz`.
#[test]
fn the_fuzz_properties_hold_on_hostile_inputs() {
    use crate::fuzz_regressions::checks::{check_asciidoc, check_pdf};
    let started = Instant::now();
    let mut adoc: Vec<Vec<u8>> = vec![
        b"----\nnever closed\n".to_vec(),
        "====\n".repeat(100_000).into_bytes(),
        "====\n=====\n".repeat(50_000).into_bytes(),
        format!("= T\n\n{}\n", "x".repeat(10 << 20)).into_bytes(),
        format!("{}\n", "xref:a[".repeat(1 << 17)).into_bytes(),
        format!("{}\n", "<<".repeat(1 << 19)).into_bytes(),
        format!(
            "{}{}\n",
            ":a: {a}{a}{a}{a}\n".repeat(1000),
            "{a}".repeat(100_000)
        )
        .into_bytes(),
        "|===\n|a|b\n".repeat(10_000).into_bytes(),
        b"= \xff\xfe title\n:keywords: \n[NOTE]\n====\n".to_vec(),
    ];
    adoc.push(
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).expect("readme"),
    );
    for input in &adoc {
        check_asciidoc(input);
    }
    for (_, bytes) in hostile_pdfs()
        .into_iter()
        .filter(|(name, _)| *name != "self-drawing.pdf" && *name != "deep.pdf")
    {
        check_pdf(&bytes);
    }
    check_pdf(b"");
    check_pdf(b"%PDF-1.4\n%%EOF");
    check_pdf(b"BT /F1 12 Tf (text) Tj ET");
    eprintln!("fuzz properties on hostile inputs: {:?}", started.elapsed());
}
