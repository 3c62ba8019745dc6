//! Nothing to link: the package `vdl-benches` holds the project's end-to-end benchmarks (see
//! `README.md` next to this file); per-crate micro-benchmarks stay in their crates.
