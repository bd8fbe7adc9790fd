"""Build-time instrumentation of C/C++ SUTs: the compiler wrappers (`ccwrap`: mallory-cc,
mallory-c++), the LLVM toolchain and pass (`toolchain`), the `// INSTRUMENT_*` annotation
scanner (`annotations`), stable code-event ids (`event_ids`) and the catalogue that names
them (`catalogue`, read from the binary's ELF section by `elf_section`)."""
