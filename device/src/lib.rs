//! rnicd library
