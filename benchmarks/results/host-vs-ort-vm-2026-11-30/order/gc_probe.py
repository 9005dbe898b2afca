import gc, sys, time
from benchmarks.host_vs_onnxruntime import main
big = ["resnet18", "squeezenet", "densenet121", "regnet_y_400mf", "shufflenet_v2", "googlenet", "inception_v3",
       "mobilenet_v2", "efficientnet_b0", "convnext_tiny", "whisper_encoder", "bert", "gpt2"]
tiny = ["whisper_encoder_64", "bert_64", "ocr_classifier", "crnn"]
def run(models):
    args = ["--models-dir", "/tmp/models_all", "--rounds", "4", "--out", "/tmp/gcp"]
    for m in models:
        args += ["--model", m]
    main(args)
print("objects at start", len(gc.get_objects()))
run(tiny)
run(big)
print("objects after big", len(gc.get_objects()), "gc counts", gc.get_count())
t0 = time.perf_counter(); gc.collect(); print("full collect s", time.perf_counter() - t0)
run(tiny)
gc.disable()
run(tiny)
gc.enable()
