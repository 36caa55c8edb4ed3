"""`python -m keras_transformer ...`, the same as the `keras-transformer` console script."""

import sys

from keras_transformer.cli import main

sys.exit(main())
