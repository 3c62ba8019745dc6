//! `vdl` binary entry point.
fn main() -> anyhow::Result<()> {
    anyhow::bail!("vdl: the server is not built yet (see issue 'Replicated log streams')")
}
