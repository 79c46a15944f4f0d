//! PCI side of an rnic function: what the VMM sees before it ever touches a BAR.
//!
//! [`config`] models the 4 KiB PCI Express configuration space of a PF or a VF, including
//! the BARs' sizing behaviour, the MSI-X and SR-IOV capabilities, and function-level reset.

pub mod config;
