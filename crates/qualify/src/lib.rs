//! podnet's qualification: plans ([`plan`]), the run ([`run`]) and the reports ([`report`],
//! [`html`]).

#![forbid(unsafe_code)]

pub mod check;
pub mod html;
pub mod plan;

pub mod podrun;
pub mod report;
pub mod run;

/// Writes a report's three files to `dir` (created if need be): report.json, junit.xml and
/// report.html. An error names the folder it could not create or the file it could not
/// write.
pub fn write_reports(r: &report::Report, dir: &std::path::Path) -> std::io::Result<()> {
    let named = |what: &str, p: &std::path::Path, e: std::io::Error| {
        std::io::Error::new(e.kind(), format!("cannot {what} {}: {e}", p.display()))
    };
    std::fs::create_dir_all(dir).map_err(|e| named("create", dir, e))?;
    for (file, text) in
        [("report.json", r.json()), ("junit.xml", r.junit()), ("report.html", html::render(r))]
    {
        let p = dir.join(file);
        std::fs::write(&p, text).map_err(|e| named("write", &p, e))?;
    }
    Ok(())
}
