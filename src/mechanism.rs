//! Reading pending initializer names and building the bypass JSON Patch, per mechanism.
