//! Rebuild when a built-in model or dataset file is added. `include_dir!` (in `table` and
//! `datasets`) embeds `models/` and `datasets/`;
//! it tracks the files it found, so a changed file rebuilds the crate, but a new file would go
//! unseen until something else changed. Cargo scans a directory named here for any change,
//! new files included.

fn main() {
    println!("cargo:rerun-if-changed=../../models");
    println!("cargo:rerun-if-changed=../../datasets");
}
