//! Writes what comes from the CLI definitions (not installed):
//!
//!   masq-cli-gen DIR                 completions and man pages under DIR
//!                                    (`make` runs it on target/cli)
//!   masq-cli-gen --docs PAGE         rewrite PAGE's generated CLI reference
//!                                    (`make docs-cli`: docs/operator-guide.md)
//!   masq-cli-gen --reference         print the reference (Markdown)

use masq_backend::operator::cli::generate;
use std::path::Path;
use std::process::ExitCode;

const USAGE: &str = "usage: masq-cli-gen DIR | --docs PAGE | --reference";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let res = match argv.as_slice() {
        ["--reference"] => {
            print!("{}", generate::reference_markdown());
            Ok(())
        }
        ["--docs", page] => update(Path::new(page)),
        [dir] if !dir.starts_with('-') => generate::write_all(Path::new(dir))
            .map(|files| println!("masq-cli-gen: wrote {} files under {dir}", files.len()))
            .map_err(|e| format!("{dir}: {e}")),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("masq-cli-gen: {e}");
            ExitCode::from(1)
        }
    }
}

fn update(page: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(page).map_err(|e| format!("{}: {e}", page.display()))?;
    let new = generate::update_reference(&text).map_err(|e| format!("{}: {e}", page.display()))?;
    if new != text {
        std::fs::write(page, new).map_err(|e| format!("{}: {e}", page.display()))?;
        println!(
            "masq-cli-gen: updated the CLI reference in {}",
            page.display()
        );
    }
    Ok(())
}
