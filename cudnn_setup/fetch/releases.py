"""Published sha256 checksums of NVIDIA cuDNN archives for Linux x86_64, by file name.

Provenance: Spack's `cudnn` package (var/spack/repos/builtin/packages/cudnn/package.py, 2024),
which records NVIDIA's checksum for each archive; the file names follow NVIDIA's naming, as
Spack's url_for_version builds them: `cudnn-{cuda}-linux-x64-v{version}.tgz` up to 8.3.0,
`cudnn-linux-x86_64-{version}_cuda{cuda}-archive.tar.xz` from 8.3.1 (CUDA major only from 8.5).
Add an entry only with its source: a wrong one would refuse a good archive.
"""
from __future__ import annotations

KNOWN_SHA256: dict[str, str] = {
    "cudnn-linux-x86_64-9.2.0.82_cuda12-archive.tar.xz":
        "1362b4d437e37e92c9814c3b4065db5106c2e03268e22275a5869e968cee7aa8",
    "cudnn-linux-x86_64-9.2.0.82_cuda11-archive.tar.xz":
        "99dcb3fa2bf7eed7f35b0f8e58e7d1f04d9a52e01e382efc1de16fed230d3b26",
    "cudnn-linux-x86_64-8.9.7.29_cuda12-archive.tar.xz":
        "475333625c7e42a7af3ca0b2f7506a106e30c93b1aa0081cd9c13efb6e21e3bb",
    "cudnn-linux-x86_64-8.9.7.29_cuda11-archive.tar.xz":
        "a3e2509028cecda0117ce5a0f42106346e82e86d390f4bb9475afc976c77402e",
    "cudnn-linux-x86_64-8.9.5.30_cuda12-archive.tar.xz":
        "2a2eb89a2ab51071151c6082f1e816c702167a711a9372f9f73a7b5c4b06e01a",
    "cudnn-linux-x86_64-8.9.5.30_cuda11-archive.tar.xz":
        "bbe10e3c08cd7e4aea1012213781e4fe270e1c908263444f567cafefb2cc6525",
    "cudnn-linux-x86_64-8.9.0.131_cuda12-archive.tar.xz":
        "477631002be61022b60961cba0a501271507a93f81d6b08384bc320cb8706c98",
    "cudnn-linux-x86_64-8.9.0.131_cuda11-archive.tar.xz":
        "3cb82c50723f14b41d43523f222cd52cc9d50b3ad67c380f4be51bd1133daa2d",
    "cudnn-linux-x86_64-8.8.1.3_cuda12-archive.tar.xz":
        "79d77a769c7e7175abc7b5c2ed5c494148c0618a864138722c887f95c623777c",
    "cudnn-linux-x86_64-8.8.1.3_cuda11-archive.tar.xz":
        "af7584cae0cc5524b5913ef08c29ba6154113c60eb0a37a0590a91b515a8a8f9",
    "cudnn-linux-x86_64-8.7.0.84_cuda11-archive.tar.xz":
        "976c4cba7233c97ae74006afab5172976300ba40f5b250a21f8cf71f59c9f76d",
    "cudnn-linux-x86_64-8.6.0.163_cuda11-archive.tar.xz":
        "bbc396df47294c657edc09c600674d608cb1bfc80b82dcf4547060c21711159e",
    "cudnn-linux-x86_64-8.5.0.96_cuda11-archive.tar.xz":
        "5454a6fd94f008728caae9adad993c4e85ef36302e26bce43bea7d458a5e7b6d",
    "cudnn-linux-x86_64-8.4.0.27_cuda11.6-archive.tar.xz":
        "d19bdafd9800c79d29e6f6fffa9f9e2c10d1132d6c2ff10b1593e057e74dd050",
    "cudnn-linux-x86_64-8.4.0.27_cuda10.2-archive.tar.xz":
        "14c5e3ca4258271996d1fd959c42d17c582ce4d9aff451f84524469e784fd154",
    "cudnn-linux-x86_64-8.3.3.40_cuda11.5-archive.tar.xz":
        "eabe96c75cf03ea4f5379894d914f1f8ae14ceab121989e84b0836d927fb7731",
    "cudnn-linux-x86_64-8.3.1.22_cuda11.5-archive.tar.xz":
        "f5ff3c69b6a8a9454289b42eca1dd41c3527f70fcf49428eb80502bcf6b02f6e",
    "cudnn-11.4-linux-x64-v8.2.4.15.tgz":
        "0e5d2df890b9967efa6619da421310d97323565a79f05a1a8cb9b7165baad0d7",
    "cudnn-11.2-linux-x64-v8.1.1.33.tgz":
        "98a8784e92862f20018d20c281b30d4a0cd951f93694f6433ccf4ae9c502ba6a",
    "cudnn-10.2-linux-x64-v8.1.1.33.tgz":
        "2a4a7b99a6e9bfa690eb19bb41e49553f2a7a491a5b3abfcae900e166c5b6ebd",
    "cudnn-11.1-linux-x64-v8.0.5.39.tgz":
        "1d046bfa79399dabcc6f6cb1507918754439442ea0ca9e0fbecdd446f9b00cce",
    "cudnn-10.2-linux-x64-v8.0.5.39.tgz":
        "21f84c05c67bf1ec859e77c38ccd5bf154964fa1c308f449959be4c356e382f3",
    "cudnn-10.2-linux-x64-v7.6.5.32.tgz":
        "600267f2caaed2fd58eb214ba669d8ea35f396a7d19b94822e6b36f9f7088c20",
    "cudnn-10.1-linux-x64-v7.6.5.32.tgz":
        "7eaec8039a2c30ab0bc758d303588767693def6bf49b22485a2c00bf2e136cb3",
    "cudnn-10.0-linux-x64-v7.6.5.32.tgz":
        "28355e395f0b2b93ac2c83b61360b35ba6cd0377e44e78be197b6b61b4b492ba",
    "cudnn-9.2-linux-x64-v7.6.5.32.tgz":
        "a2a2c7a8ba7b16d323b651766ee37dcfdbc2b50d920f73f8fde85005424960e4",
    "cudnn-10.1-linux-x64-v7.6.4.38.tgz":
        "32091d115c0373027418620a09ebec3658a6bc467d011de7cdd0eb07d644b099",
    "cudnn-10.0-linux-x64-v7.6.4.38.tgz":
        "417bb5daf51377037eb2f5c87649000ca1b9cec0acb16cfe07cb1d3e9a961dbf",
}
PROVENANCE = "Spack cudnn package (NVIDIA's published checksums)"


def known_sha256(name: str) -> str | None:
    return KNOWN_SHA256.get(name)
