//! A sysfs tree as the readers of this crate see it: the live one (or a recorded copy) under
//! a root folder, or a tool's own view of one (doctor reads through its `Source`, which
//! records what it reads). Paths are relative to the sysfs root: `class/infiniband/mlx5_0`.

use std::path::Path;

/// What a reader asks of a sysfs tree.
pub trait SysFs {
    /// The file at `rel`, trimmed; `None` when absent, unreadable or empty.
    fn read(&self, rel: &str) -> Option<String>;
    /// The names in folder `rel`, sorted; empty when it is absent.
    fn list(&self, rel: &str) -> Vec<String>;
    /// The last component of where the link `rel` points (`device/driver` → `mlx5_core`);
    /// `None` when it is no link.
    fn link_name(&self, rel: &str) -> Option<String>;
}

impl SysFs for &Path {
    fn read(&self, rel: &str) -> Option<String> {
        crate::read(&self.join(rel))
    }

    fn list(&self, rel: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.join(rel))
            .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
            .unwrap_or_default();
        names.sort();
        names
    }

    fn link_name(&self, rel: &str) -> Option<String> {
        link_name(&self.join(rel))
    }
}

/// The last component of where the link at `path` points; `None` when it is no link.
pub fn link_name(path: &Path) -> Option<String> {
    let to = std::fs::read_link(path).ok()?;
    Some(to.file_name()?.to_string_lossy().into_owned())
}
