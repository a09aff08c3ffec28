//! The CPUs' frequency scaling (`devices/system/cpu/cpu<N>/cpufreq`).

use std::path::Path;

use crate::read;

/// Each CPU's cpufreq governor (`cpu0` → `performance`), sorted by CPU number; empty where
/// there is no cpufreq (a VM, a container).
pub fn governors(sys: &Path) -> Vec<(String, String)> {
    let cpus = sys.join("devices/system/cpu");
    let mut govs: Vec<(u32, String, String)> = std::fs::read_dir(&cpus)
        .map(|d| {
            d.filter_map(|e| {
                let n = e.ok()?.file_name().into_string().ok()?;
                let i = n.strip_prefix("cpu")?.parse::<u32>().ok()?;
                Some((i, n.clone(), read(&cpus.join(&n).join("cpufreq/scaling_governor"))?))
            })
            .collect()
        })
        .unwrap_or_default();
    govs.sort();
    govs.into_iter().map(|(_, n, g)| (n, g)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn governors_of_a_recorded_tree_in_cpu_order() {
        let root = std::env::temp_dir().join(format!("podnet-host-cpu-{}", std::process::id()));
        for (cpu, gov) in [(10, "powersave"), (2, "performance"), (0, "performance")] {
            let d = root.join(format!("devices/system/cpu/cpu{cpu}/cpufreq"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("scaling_governor"), format!("{gov}\n")).unwrap();
        }
        // Not CPUs, and a CPU without cpufreq.
        std::fs::create_dir_all(root.join("devices/system/cpu/cpuidle")).unwrap();
        std::fs::create_dir_all(root.join("devices/system/cpu/cpu3")).unwrap();
        let g = governors(&root);
        let _ = std::fs::remove_dir_all(&root);
        let want = [("cpu0", "performance"), ("cpu2", "performance"), ("cpu10", "powersave")];
        assert_eq!(g, want.map(|(c, g)| (c.to_string(), g.to_string())));
        assert!(governors(Path::new("/nonexistent")).is_empty());
    }
}
