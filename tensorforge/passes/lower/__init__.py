"""Lowering passes: graph -> structured -> loop (-> C in tensorforge.codegen)."""
