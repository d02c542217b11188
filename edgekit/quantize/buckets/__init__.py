"""Step buckets (``--step-buckets``): where the ranges of the decode loop split (``ranges``), the
knob a profile's search turns before any fallback or promotion (``state.BucketState``), one
weights file every bucket's graph maps (``shared``), and a candidate on the budget runtime with
the memory its graphs add (``candidate``)."""
