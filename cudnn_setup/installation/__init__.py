"""The cuDNN that verification looks at (`model.Installation`) and finding it: in a CUDA root
from the manifest or the files, or anywhere else on the machine (`locate`)."""
