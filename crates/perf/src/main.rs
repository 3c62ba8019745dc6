//! `vdl-perf`: benchmark client (not built yet).
fn main() -> anyhow::Result<()> {
    anyhow::bail!("vdl-perf is not built yet")
}
