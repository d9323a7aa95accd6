// Unity only (needs UnityEngine; left out of the Mono build): drives every Agent of the scene from FixedUpdate.
//
// Put one on a GameObject, set Address to what `rlinks learner` prints, and
// give your agents Rlinks.Agent as base class: they join in OnEnable and
// leave in OnDisable. Each FixedUpdate (every DecisionPeriod-th) is one
// decision for all of them; on-policy, the FixedUpdate that completes this
// game's share of an update waits for the new weights (the game pauses,
// as it does for ML-Agents' trainer).
#if UNITY_5_3_OR_NEWER
using UnityEngine;

namespace Rlinks.Unity
{
    [DefaultExecutionOrder(-100)]
    public sealed class RLinksAcademy : MonoBehaviour
    {
        public string Address = "127.0.0.1:5555";
        public Inference Inference = Inference.Automatic;
        [Tooltip("Steps between decisions, as ML-Agents' DecisionRequester")]
        public int DecisionPeriod = 1;
        [Tooltip("Seconds the first connection waits for a learner that is not up yet")]
        public float ConnectWaitSeconds = 60;

        AgentDriver driver;
        int tick;
        bool ended;

        public static RLinksAcademy Instance { get; private set; }

        void Awake()
        {
            Instance = this;
            var options = new EnvClientOptions { Inference = Inference };
            options.Connection.ConnectWait = System.TimeSpan.FromSeconds(ConnectWaitSeconds);
            options.Connection.Warn = text => Debug.LogWarning("rlinks: " + text);
            driver = new AgentDriver(Address, options);
        }

        public void Register(Agent agent) { driver.Add(agent); }
        public void Unregister(Agent agent) { if (!ended) driver.Remove(agent); }

        void FixedUpdate()
        {
            if (ended || ++tick % DecisionPeriod != 0) return;
            try { driver.Step(); }
            catch (TrainingEndedException e)
            {
                ended = true;
                Debug.Log("rlinks: " + e.Message);
            }
        }

        void OnDestroy()
        {
            if (driver != null) driver.Close();
            if (Instance == this) Instance = null;
        }
    }
}
#endif
