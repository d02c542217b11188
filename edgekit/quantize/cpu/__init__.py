"""The ``cpu`` and ``trt`` profiles: ORT's QDQ quantizer on the weighted ops (``ptq``, the nodes
``select`` chooses), a budget search that moves the most sensitive layers back to float
(``search``), the hooks that run them in the pipeline (``fallback.FallbackProfile``) and what a
written graph holds (``structure``: TensorRT's QDQ rules too)."""
