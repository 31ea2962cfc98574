"""x86-64 machine code written in Python: registers, the encoder (REX/VEX/EVEX), an assembler with labels,
executable memory, and functions built over virtual registers with linear-scan allocation (System V ABI)."""
