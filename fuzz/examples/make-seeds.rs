//! Writes the seed corpora of the fuzz targets from recorded traffic:
//! `cargo +nightly run --example make-seeds` in fuzz/ (see README.md).

use std::path::Path;

fn write(target: &str, seeds: &[Vec<u8>]) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    std::fs::create_dir_all(&dir).expect("create the corpus directory");
    for (i, seed) in seeds.iter().enumerate() {
        std::fs::write(dir.join(format!("seed-{i:03}")), seed).expect("write a seed");
    }
    println!("{target}: {} seeds in {}", seeds.len(), dir.display());
}

fn main() {
    write("recv", &rnic_fuzz::seeds::recv_seeds());
    write("eth", &rnic_fuzz::seeds::eth_seeds());
    write("eth_rings", &rnic_fuzz::seeds::eth_rings_seeds());
    write("ops", &rnic_fuzz::seeds::ops_seeds());
    write("send", &rnic_fuzz::seeds::send_seeds());
    write("vfio", &rnic_fuzz::seeds::vfio_seeds());
    write("vfio_socket", &rnic_fuzz::seeds::vfio_socket_seeds());
}
