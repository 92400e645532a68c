# Deleting is the one irreversible step, so it is fenced: it exists only in the final phase, it
# needs every verify of the phase to have passed (they are its inputs, and ferry_task.py checks
# them again, as in the Nextflow pipeline), and ferry prune itself refuses beyond
# prune.max_delete unless prune.force is set.


rule prune:
    input:
        verified=all_verify_json,
    output:
        json=records("prune").out,
        bench=records("prune").bench,
    log:
        records("prune").log,
    retries: retries("prune")
    conda:
        "../envs/ferry.yaml"
    threads: threads("prune")
    resources:
        **requests("prune"),
    shell:
        task("prune")
