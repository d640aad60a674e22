//! The hardware preset files on disk are the presets the binary embeds: every
//! `src/presets/hardware/*.toml` is a preset named after its file, and every preset has one.
//! (The Core's own sources do no I/O, so this reads the folder from an integration test.)

use std::path::Path;
use tensorforge_core::presets;
use tensorforge_core::HardwareSpec;

#[test]
fn every_file_in_the_folder_is_an_embedded_preset() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/presets/hardware");
    let mut on_disk = vec![];
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let stem = name
            .strip_suffix(".toml")
            .unwrap_or_else(|| panic!("{name}: not a .toml file"));
        let text = std::fs::read_to_string(&p).unwrap();
        let spec = HardwareSpec::from_file_text(&text, &name).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(spec.name, stem, "{name}");
        // The file on disk is exactly what the binary embeds.
        assert_eq!(presets::hardware(stem).unwrap(), spec, "{name}");
        on_disk.push(stem.to_string());
    }
    on_disk.sort();
    let mut embedded = presets::hardware_names();
    embedded.sort();
    assert_eq!(on_disk, embedded);
}
