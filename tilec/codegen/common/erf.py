"""erf(x) = x * P(x^2) / Q(x^2) for |x| <= ERF_SATURATES (float32's erf is +-1 beyond 3.92):
the rational fit the backends share (a minimax fit made for tilec, Lawson-reweighted least
squares, P(0) = 2/sqrt(pi); positive coefficients, so evaluation never cancels: 2.4e-8 in exact
arithmetic; ``cpu/mathlib.py`` says more).  Coefficients from the highest power."""

ERF_P = [1.9842562e-06, 2.846261e-04, 3.8910217e-03, 5.3127777e-02, 1.9373445e-01, 1.1283792]
ERF_Q = [3.7396283e-05, 1.1871608e-03, 1.5223805e-02, 1.15428604e-01, 5.050256e-01, 1.0]
ERF_SATURATES = 4.0
