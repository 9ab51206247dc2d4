//! Rebuild when a built-in data file is added. `include_dir!` (in `config`) embeds
//! `experiments/`, `profiles/`, `ladders/` and `templates/`; it tracks the files it found, so a
//! changed file rebuilds the crate, but a new file would go unseen until something else
//! changed. Cargo scans a directory named here for any change, new files included.

fn main() {
    for dir in ["experiments", "profiles", "ladders", "templates"] {
        println!("cargo:rerun-if-changed=../../{dir}");
    }
}
