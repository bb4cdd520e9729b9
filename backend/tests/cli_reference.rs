//! docs/operator-guide.md's CLI reference is what the CLI definitions
//! give (regenerate it with `make docs-cli`), and its JSON section lists
//! every kind of masqctl's output.

use masq_backend::operator::cli::{generate, output};

fn page() -> String {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/operator-guide.md");
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn the_operator_guides_cli_reference_is_generated() {
    let page = page();
    let generated = generate::update_reference(&page).expect("the page has the marks");
    assert!(
        generated == page,
        "docs/operator-guide.md's CLI reference differs from the CLI definitions; \
         regenerate it with\n  make docs-cli"
    );
}

#[test]
fn the_operator_guide_lists_every_kind_and_the_api_version() {
    let page = page();
    assert!(page.contains(&format!("`apiVersion: {}`", output::API_VERSION)));
    for kind in output::KINDS {
        assert!(
            page.contains(&format!("| `{kind}` |")),
            "{kind} not in the guide"
        );
    }
}
