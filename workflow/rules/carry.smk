# The destination as this pass left it, for the next pass to plan against instead of listing it
# (docs/scale.md): the listing the plan used, patched with what every verify saw and what prune
# deleted, left at the state location by `ferry carry`. A pass that fails before this step
# leaves no new state, and the next pass lists the destination fresh.


rule carry:
    input:
        unpack(carry_inputs),
    output:
        json=records("carry").out,
        bench=records("carry").bench,
    log:
        records("carry").log,
    retries: retries("carry")
    conda:
        "../envs/ferry.yaml"
    threads: threads("carry")
    resources:
        **requests("carry"),
    message:
        message("carry")
    shell:
        task("carry")
