"""What a spec asks beyond the hook walk, each lesson one module run on its own fresh builds."""
